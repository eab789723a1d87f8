"""Restore's plan (`mam restore`, `mam reconcile --apply --restore`): start registered agents again after their
server died, from the launch spec their row keeps, resuming the agent's own conversation where the row knows its
session id (docs/cli.md, docs/json.md).

A row is restored only once: each one is claimed under the registry lock, and only while it is still exactly
as the plan saw it, so of two concurrent restores one starts the agent and the other finds the row taken.
A row whose server could not be asked (`unknown`) is never restored: the agent may still run there.
A spec runs only when this user's mam signed it (mam/agents/specsign.py); any other is `untrusted`, shown with its argv,
and runs only with the user's consent (`--trust-spec`, or a yes at a terminal), which signs it as theirs.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mam import registry
from mam.agents import backoff, inflight, specsign
from mam.agents.inflight import TOKEN
from mam.agents.launch import (
    agent_argv,
    check_env_names,
    env_assignments,
    launch,
    missing_program,
    spawn_request,
    with_env,
)
from mam.agents.rows import live_agent, row_spec, rows_named, rows_on, snapshot, unchanged_rows
from mam.agents.stopping import STOP_REQUESTED
from mam.calls.route import remote_route
from mam.plugin.records import CallContext, ServerOutcome, ServerState, SpawnRequest
from mam.registry import Row, RowKey
from mam.servers.app import App
from mam.servers.availability import resolve_explicit_backend
from mam.servers.bootstrap import start_server
from mam.servers.fanout import ServerKey, outcomes_for
from mam.servers.hosts import checked_host
from mam.util.errors import MamError
from mam.util.names import check_name
from mam.util.progress import waiting

if TYPE_CHECKING:
    from mam.kinds.library import Library

# Deferred imports (inside functions), for start-up: the kind library and the remains load only on the paths that read
# them.

NO_SPEC = "no launch spec: spawn it again"
# Why --all passes a row over (Step.reason): none of them is a failure of the command.
SKIP_REASONS = ("no_spec", "never_started", "stopped", "finished", "crash_loop", "backoff")


@dataclass
class Step:
    """One row's part of the plan, and what became of it."""

    row: Row
    seen: dict[str, Any]
    server_state: str
    outcome: str  # would_restore | restored | failed | skipped | running | untrusted
    message: str
    spec: dict[str, Any] | None = None
    argv: list[str] | None = None  # what runs, without the `env NAME=VALUE` that sets the variables
    resume: bool = False
    env_missing: list[str] = field(default_factory=list)
    bootstrap: bool = False
    pane_id: str | None = None
    trust: str | None = None  # what the spec's signature says (mam.agents.specsign), once the plan got that far
    consented: bool = False  # the user said to run it anyway: the claim signs it as theirs
    # The resume argv holds words the workspace's .mam/states.yaml put there, which no signature covers.
    workspace_resume: bool = False
    automatic: bool = False  # --all: held back by the backoff and a crash loop, and counted
    reason: str | None = None  # one of SKIP_REASONS when --all passed the row over
    ended: dict[str, Any] = field(default_factory=dict)  # how its agent ended, read before its pane goes

    def as_json(self) -> dict[str, Any]:
        row, spec = self.row, self.spec or {}
        return {"name": row.name, "backend": row.backend, "server": row.server, "host": row.host,
                "status": row.status, "server_state": self.server_state, "outcome": self.outcome,
                "message": self.message,
                "bootstrap": self.bootstrap, "argv": self.argv, "cwd": spec.get("cwd"), "resume": self.resume,
                "agent_session": row.agent_session, "env_names": list(spec.get("env_names") or ()),
                "env_missing": self.env_missing, "pane_id": self.pane_id,
                "spec_trust": "consented" if self.consented else self.trust, "reason": self.reason}


class SpecTrust:
    """The signatures of one command's specs, checked under this user's key (read once, when first needed)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self._key: bytes | None = None
        self._loaded = False

    def key(self, create: bool = False) -> bytes | None:
        if not self._loaded or (self._key is None and create):
            self._key = specsign.load_key(self.env, create)  # an unusable key file is refused here
            self._loaded = True
        return self._key

    def verdict(self, row: Row, spec: Mapping[str, Any]) -> str:
        signature = row.raw.get(specsign.FIELD)
        key = self.key() if signature else None
        return specsign.verdict(key, signature, signed_fields(row), spec)

    def signature(self, row: Row, spec: Mapping[str, Any]) -> str:
        key = self.key(create=True)
        assert key is not None
        return specsign.sign(key, signed_fields(row), spec)


def signed_fields(row: Row) -> dict[str, Any]:
    return specsign.row_fields(row.name, row.backend, row.server, row.host, row.agent, row.agent_session)


_DOUBT = {"unsigned": "its launch spec carries no signature of your mam (written by hand, by another program, or "
                      "before mam signed specs)",
          "mismatch": "its launch spec, or where and as what it runs, is not as your mam signed it (edited by "
                      "hand, or signed with another user's key)",
          "no_key": "you have no launch spec key, so its signature cannot be checked",
          "workspace_resume": "its resume argv holds words from this workspace's .mam/states.yaml, which no "
                              "signature covers"}


def consent_hint(row: Row) -> str:
    """The command that runs an untrusted spec once the user has read it."""
    import shlex

    words = ["mam", "restore", row.name, "--server", row.server, *(("--host", row.host) if row.host else ()),
             "--trust-spec"]
    return shlex.join(words)


def is_candidate(row: Row, live: str, named: bool) -> bool:
    """--all takes terminated rows and active rows their server does not list (drift A); a row named on the
    command line is taken whatever inactive status it has."""
    if row.status == "terminated" or (row.status == "running" and live != "alive"):
        return True
    return named and not row.active


def _argv(step: Step, library: Library, app: App) -> tuple[str, ...]:
    """The argv that starts the row's agent again, resuming its session when the row knows it."""
    from mam.kinds.library import load_library

    resumed, step.resume = _library_argv(step, library)
    spec = step.spec or {}
    own = (*agent_argv(spec.get("kind"), spec.get("command"), []), *(spec.get("args") or ()))
    # A clone may carry .mam/states.yaml: a resume template of its own (claude's --mcp-config runs any program),
    # or `programs` that make a kind's resume apply to another program, is outside the spec's signature, so an
    # argv that is neither the spec's own nor the one the shipped kinds give needs the user's consent.
    try:
        shipped: tuple[str, ...] | None = _library_argv(step, load_library(None))[0]
    except MamError:
        shipped = None
    step.workspace_resume = resumed not in (shipped, own)
    return resumed


def _library_argv(step: Step, library: Library) -> tuple[tuple[str, ...], bool]:
    """The argv `library` gives for the step's spec, and whether it resumes the row's session."""
    spec, row = step.spec or {}, step.row
    args = list(spec.get("args") or ())
    program = agent_argv(spec.get("kind"), spec.get("command"), [])
    session = row.agent_session
    if session:
        kind = library.kind_of(program, spec.get("kind"))
        resumed = library.resume_argv(kind, program[0], args, session) if kind else None
        if resumed is not None:
            return (*program, *resumed[1:]), True
    return (*program, *args), False


def _plan(app: App, row: Row, outcome: ServerOutcome, named: bool, library: Library,
          trust: SpecTrust, rules: backoff.Policy | None = None, now: float = 0.0,
          fresh: Mapping[str, Any] | None = None) -> Step | None:
    live, _ = live_agent(row, outcome)
    state = outcome.state.value
    step = Step(row, snapshot(row), state, "skipped", "", automatic=not named)
    if outcome.state is ServerState.UNKNOWN:
        if not (named or is_candidate(row, live, named)):
            return None
        reason = outcome.error.message if outcome.error else "no answer"
        step.message = f"{row.backend} server {row.server} could not be asked ({reason}): it may still run there"
        return step
    if live == "alive":
        if not named:
            return None
        step.outcome, step.message = "running", f"already running on {row.backend} server {row.server}"
        return step
    if row.status == "starting":
        if not named:
            return None
        step.message = ("registered starting: a spawn or restore of it may be under way; if not, "
                        "`mam reconcile --apply` settles it")
        return step
    if not is_candidate(row, live, named):
        return None
    if step.automatic and row.raw.get("spawn_failed") is True:
        why = row.raw.get("terminated_reason")
        step.reason = "never_started"
        step.message = "its spawn never started it" + (f" ({why})" if isinstance(why, str) and why else "") + \
            f": --all leaves it; spawn it again, or `mam restore {row.name}`"
        return step
    if step.automatic and row.raw.get(STOP_REQUESTED) is not None:
        # `mam stop` recorded it before closing the agent: a row whose outcome could not be written (a full disk)
        # still says running, and must not bring back what the user stopped.
        step.reason = "stopped"
        step.message = f"`mam stop` stopped it: --all leaves it; `mam restore {row.name}` starts it again"
        return step
    if step.automatic and _finished(row, live, fresh):
        # Its program exited 0: its work is over, and starting it again would only run it twice.
        step.reason = "finished"
        step.message = f"it finished (exited with status 0): --all leaves it; `mam restore {row.name}` starts it again"
        return step
    step.spec = row_spec(row)
    step.outcome = "failed"
    if step.spec is None:
        step.message = NO_SPEC
        if step.automatic:  # an adopted row: nothing to start it from, and no failure of --all
            step.outcome, step.reason = "skipped", "no_spec"
        return step
    held = backoff.held_back(row.raw, rules, now) if step.automatic and rules is not None else None
    if held is not None:
        step.outcome = "skipped"
        step.reason, step.message = held
        if step.reason == "crash_loop":
            step.message = crash_message(row.name, step.message, row.raw)
        return step
    try:
        step.argv = list(_argv(step, library, app))
    except MamError as exc:
        step.message = exc.message
        return step
    try:
        # A hand-edited spec is checked as spawn checks --env: a name the scrub removes is never handed back.
        names = check_env_names(app, list(step.spec.get("env_names") or ()))
        present, step.env_missing = env_assignments(app, names)
        with_env(tuple(step.argv), present)
    except MamError as exc:
        step.message = exc.message
        return step
    cwd = Path(step.spec["cwd"])
    # On another host the directory and the program are there: the start itself says when they are not. A
    # worktree's folder that is gone is made again from its branch first (_restore; refused when that is gone too).
    remade = _signed_worktree(step, trust) and cwd.is_absolute()
    if not remade and (not cwd.is_absolute() or (not row.host and not cwd.is_dir())):
        step.message = f"its directory {step.spec['cwd']} is not a directory any more"
        return step
    try:
        spec = app.plugins.spec(row.backend)
    except MamError as exc:
        step.message = exc.message
        return step
    missing = missing_program(step.argv[0], app.server_env, cwd) if spec.program_check and not row.host and \
        cwd.is_dir() else None
    if missing is not None:
        step.message = missing
        return step
    step.bootstrap = outcome.state is ServerState.DOWN
    step.trust = trust.verdict(row, step.spec)
    if step.trust == "signed" and step.workspace_resume:
        step.trust = "workspace_resume"
    if step.trust != "signed":  # not run, and not started a server for: shown with its argv, for consent
        step.outcome = "untrusted"
        step.message = f"{_DOUBT[step.trust]}: not run; read its argv, then `{consent_hint(row)}` runs it and " \
                       "signs it as yours"
        return step
    _would_restore(step)
    return step


def _would_restore(step: Step) -> None:
    step.outcome = "would_restore"
    step.message = "would start " + ("its server and " if step.bootstrap else "") + "the agent" + (
        ", resuming its session" if step.resume else "") + (", which you trust" if step.consented else "")


def consent(steps: list[Step], trust_all: bool, ask: Callable[[dict[str, Any]], bool] | None) -> None:
    """Turn each untrusted step the user consents to (all of them with `trust_all`, else each one `ask` says yes
    to, seeing its entry: argv, cwd, host, env_names) into one to restore; its claim signs the spec as theirs."""
    for step in steps:
        if step.outcome == "untrusted" and (trust_all or (ask is not None and ask(step.as_json()))):
            step.consented = True
            _would_restore(step)


def crash_message(name: str, why: str, raw: Mapping[str, Any]) -> str:
    """A crash loop's line: why, how the agent last ended and the last line it printed, and how to go on."""
    from mam.agents.remains import how_it_ended, last_line

    ended, said = how_it_ended(raw), last_line(raw)
    last = (f"; it {ended}" if ended else "") + (f"; its last output: {said}" if said else "")
    return f"{why}{last}; `mam restore {name}` starts it by hand and starts the count again"


def _claim(key: RowKey, seen: dict[str, Any], token: str, taken: list[Row], signed: dict[str, Any],
           automatic: bool = False, ended: dict[str, Any] | None = None) -> registry.Change:
    """Take the row for this restore, under the lock, only while it is exactly as the plan saw it; `signed` holds
    the spec and signature of a spec the user consented to (the row then holds what they consented to). An
    `automatic` restore is counted (mam.agents.backoff); one by hand starts the count again. `ended`: how its agent
    ended, read from its pane before this restore closes it."""

    def change(document: dict[str, Any], rows: tuple[Row, ...]) -> bool:
        row = next((r for r in rows if r.key == key), None)
        if row is None or row.raw != seen:
            if row is not None:
                taken.append(row)
            return False
        counts = backoff.counted(row.raw, registry.timestamp()) if automatic else {}
        for reset in backoff.RESET:
            row.raw.pop(reset, None)
        row.raw.update({"status": "starting", TOKEN: token, **signed, **counts, **(ended or {})})
        return True

    return change


def _signed_worktree(step: Step, trust: SpecTrust) -> bool:
    """Whether the spec records a worktree this user's mam signed: the only one restore re-makes. A consent is to
    the argv, cwd and env shown, never to a `worktree:` a clone's row names (a repository and a folder anywhere,
    where `git worktree add` would check out and run that repository's filters)."""
    return step.spec is not None and isinstance(step.spec.get("worktree"), dict) and \
        trust.verdict(step.row, step.spec) == "signed"


def _consented_fields(step: Step, trust: SpecTrust) -> dict[str, Any]:
    """The spec the user consented to (written out when it was made from `agent` and `pane.cwd`) and its new
    signature, so that later restores run it without asking; without a `worktree:` mam did not sign, so that
    consent never makes it one mam may remove or re-make."""
    assert step.spec is not None
    spec = step.spec if step.row.spec is not None else dict(step.spec)
    if isinstance(spec.get("worktree"), dict) and not _signed_worktree(step, trust):
        spec = {k: v for k, v in spec.items() if k != "worktree"}
    return {"spec": spec, specsign.FIELD: trust.signature(step.row, spec)}


def _restore(app: App, step: Step, progress: bool, trust: SpecTrust) -> None:
    row = step.row
    assert step.spec is not None and step.argv is not None
    assignments, step.env_missing = env_assignments(app, list(step.spec.get("env_names") or ()))
    kind = row.agent or step.spec.get("kind") or Path(step.argv[0]).name
    with ExitStack() as held:
        _restore_locked(app, step, progress, trust, assignments, kind, held)


def _restore_locked(app: App, step: Step, progress: bool, trust: SpecTrust, assignments: list[str], kind: str,
                    held: ExitStack) -> None:
    row = step.row
    assert step.spec is not None and step.argv is not None
    try:
        if _signed_worktree(step, trust):  # its folder, made again if gone; one consented to is not re-made
            from mam.agents.worktrees import name_lock, remake  # start-up: git only for an agent with a worktree

            # Held until the row is claimed, as spawn holds it: a `mam worktree remove` of the name never takes
            # the folder between its re-making and the start of the agent in it.
            held.enter_context(name_lock(app.workspace.dot_mam, row.name))
            with remote_route(app.route(row.host or "")):
                remake(step.spec["worktree"], app.timeout, app.backend_env)
        from mam.hooks.report import identity  # as spawn gives it (docs/hooks.md)

        spec = app.plugins.spec(row.backend)
        own = identity(spec.spawn_env, bool(row.host), row.name, app.workspace.dot_mam)
        request = spawn_request(spec, row.name, kind, step.spec["cwd"], tuple(step.argv), assignments + own)
    except MamError as exc:
        step.outcome, step.message = "failed", exc.message
        return
    token = secrets.token_hex(8)
    taken: list[Row] = []
    try:
        inflight.hold(app.workspace.dot_mam, token)  # as a spawn does: reconcile leaves the row alone
        signed = _consented_fields(step, trust) if step.consented else {}
        _restore_claimed(app, step, row, request, token, taken, assignments, progress, signed)
    except MamError as exc:
        step.outcome, step.message = "failed", exc.message
    finally:
        inflight.release(token)


def _restore_claimed(app: App, step: Step, row: Row, request: SpawnRequest, token: str, taken: list[Row],
                     assignments: list[str], progress: bool, signed: dict[str, Any]) -> None:
    try:
        fresh = app.update_registry(_claim(row.key, step.seen, token, taken, signed, step.automatic, step.ended))
    except MamError as exc:  # a locked or read-only registry: nothing was claimed or started
        step.outcome, step.message = "failed", exc.message
        return
    mine = fresh.find(row.key)
    if mine is None or mine.raw.get(TOKEN) != token:
        step.outcome = "skipped"
        now = f" (now {taken[0].status})" if taken else " (it was removed)"
        step.message = f"another command changed its row meanwhile{now}: left to it"
        return
    ctx = CallContext(timeout=app.timeout, env=app.server_env)
    try:
        with remote_route(app.route(row.host)):
            settled, _ = launch(app, row.key, token, request, ctx, progress, {"restored_at": registry.timestamp()},
                                 assignments)
    except MamError as exc:
        step.outcome, step.message = "failed", exc.message
        return
    step.outcome, step.pane_id = "restored", settled.pane_id
    step.message = "running again" + (f" in pane {settled.pane_id}" if settled.pane_id else "") + (
        ", resuming its session" if step.resume else "")
    if step.env_missing:
        step.message += f"; not set here, so not passed: {', '.join(step.env_missing)}"


def _bootstrap(app: App, key: ServerKey, steps: list[Step], progress: bool) -> None:
    """Start a down server once for the steps on it; on failure each of them fails with the reason."""
    backend, server, host = key
    where = f"{backend} server {server}" + (f" on {host}" if host else "")
    try:
        if not app.autostart:
            raise MamError("operation_failed", f"{where} is down and MAM_NO_AUTOSTART=1")
        with waiting(f"starting {where}", progress):
            start_server(app, server, host or None, backend)
    except MamError as exc:
        for step in steps:
            step.outcome, step.message = "failed", exc.message


def _brought_back(app: App, key: ServerKey, steps: list[Step]) -> None:
    """A server that starts may bring agents back itself (herdr resumes those that reported a session,
    `resume_agents_on_restore`): those are listed now, and starting them again would make a second copy. Their
    rows become `running` (only while still as the plan read them); they are not started."""
    if not any(s.outcome == "would_restore" for s in steps):
        return
    outcome = outcomes_for(app, {key})[key]
    listed = {a.name: a for a in outcome.agents if a.name is not None}
    back = [s for s in steps if s.outcome == "would_restore" and s.row.name in listed]
    if outcome.state is not ServerState.UP or not back:
        return
    seen = {s.row.key: s.seen for s in back}

    def change(document: dict[str, Any], rows: tuple[Row, ...]) -> bool:
        written = False
        for row in unchanged_rows(rows, seen):
            agent = listed[row.name]
            row.raw["status"] = "running"
            pane = {k: v for k, v in (("cwd", agent.cwd), ("id", agent.pane_id)) if v is not None}
            if pane:
                row.raw["pane"] = pane
            written = True
        return written

    try:
        app.update_registry(change)
    except MamError:
        pass  # the rows stay as they were; the agents run all the same
    for step in back:
        step.outcome, step.pane_id = "running", listed[step.row.name].pane_id
        step.message = f"its server brought it back when it started: {step.row.backend} resumed it itself"


def restore_plan(app: App, names: list[str], all_rows: bool, server: str | None = None,
                 host: str | None = None, trust: SpecTrust | None = None
                 ) -> tuple[list[Step], dict[ServerKey, ServerOutcome]]:
    """The steps for the rows meant: `names` (each one row, on `server` and `host` when given), or every row
    (of those) with `all_rows`. A spec `trust` does not find signed is `untrusted`."""
    if not names and not all_rows:
        raise MamError("usage", "say which agents to restore: NAME..., or --all",
                       hint="`mam restore --all --dry-run` shows what would be restored")
    for name in names:
        check_name(name, "agent name")
    if server is not None:
        check_name(server, "server name")
    host = checked_host(host)
    resolve_explicit_backend(app)
    reg = app.load_registry()
    if names:
        rows: list[Row] = []
        for name in dict.fromkeys(names):
            found = rows_named(app, reg, name, server, host)
            if not found:
                on = f" on server {server}" if server is not None else ""
                raise MamError("operation_failed", f"{name} is not registered{on} here ({reg.path})",
                               hint="`mam status` lists what is registered")
            rows.extend(found)
    else:
        rows = rows_on(app, reg, server, host)
    rules = backoff.policy(app.env)  # a bad setting is refused before any server is asked
    outcomes = outcomes_for(app, {r.server_key for r in rows})
    trust = trust or SpecTrust(app.env)
    now = time.time()
    fresh = {} if names else _fresh_ends(app, rows, outcomes)
    planned = (_plan(app, row, outcomes[row.server_key], bool(names), app.kinds, trust, rules, now,
                     fresh.get(row.key)) for row in rows)
    return [step for step in planned if step is not None], dict(outcomes)


def _finished(row: Row, live: str, fresh: Mapping[str, Any] | None) -> bool:
    from mam.agents.remains import end_of

    return end_of(row.raw, live, fresh)[0] == "finished"


def _fresh_ends(app: App, rows: list[Row], outcomes: Mapping[ServerKey, ServerOutcome]) -> dict[RowKey, Any]:
    """How the agents --all may restore ended, as their backends keep it now (an agent that finished is left),
    asked only of servers that are up and only about agents they do not list."""
    from mam.agents.rows import fresh_ends

    asked = [row for row in rows if outcomes[row.server_key].state is ServerState.UP
             and is_candidate(row, live_agent(row, outcomes[row.server_key])[0], False)
             and live_agent(row, outcomes[row.server_key])[0] == "absent"]
    return fresh_ends(app, asked)


def _read_ends(app: App, steps: list[Step]) -> None:
    """How the agents about to be restored, or held in a crash loop, ended, read from the panes their backend
    keeps (before the restore closes them); a crash loop is written to its row with it, once."""
    from mam.agents.remains import FIELDS, read_remains, row_fields

    asked = [s for s in steps if s.server_state == "up" and (s.outcome == "would_restore" or s.reason == "crash_loop")]
    if not asked:
        return
    found = read_remains(app, [s.row for s in asked])
    stamp = registry.timestamp()
    for step in asked:
        if step.row.key in found:
            step.ended = row_fields(app, step.row, found[step.row.key], stamp)
    looping = {s.row.key: s for s in asked if s.reason == "crash_loop" and ("crash_loop_at" not in s.row.raw or any(
        s.ended.get(k) != s.row.raw.get(k) for k in FIELDS if k in s.ended and k != "ended_at"))}
    if not looping:
        return

    def change(document: dict[str, Any], rows: tuple[Row, ...]) -> bool:
        written = False
        for row in unchanged_rows(rows, {key: s.seen for key, s in looping.items()}):
            row.raw.setdefault("crash_loop_at", stamp)
            row.raw.update(looping[row.key].ended)
            written = True
        return written

    try:
        app.update_registry(change)
    except MamError:
        return  # the row stays as it was; the step still says why it was not restored
    for step in looping.values():
        if step.ended:
            step.message = crash_message(step.row.name, step.message.split("; ")[0], step.ended)


def run_plan(app: App, steps: list[Step], progress: bool = False, trust: SpecTrust | None = None) -> None:
    trust = trust or SpecTrust(app.env)
    _read_ends(app, steps)
    todo = [s for s in steps if s.outcome == "would_restore"]
    down: dict[ServerKey, list[Step]] = {}
    for step in todo:
        if step.bootstrap:
            down.setdefault(step.row.server_key, []).append(step)
    for key, on_it in sorted(down.items()):
        _bootstrap(app, key, on_it, progress)
        _brought_back(app, key, on_it)
    for step in todo:
        if step.outcome == "would_restore":
            _restore(app, step, progress, trust)


def plan_summary(steps: list[Step]) -> dict[str, int]:
    return {outcome: sum(s.outcome == outcome for s in steps)
            for outcome in ("restored", "would_restore", "failed", "skipped", "running", "untrusted")}
