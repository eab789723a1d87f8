"""Starting an agent through its backend, for the row claimed for it (`mam spawn`, `mam restore`): its argv and
environment, the program checked where it will run, the spawn call, and the outcome written to that row only.

Backend-agnostic: the backend is reached through the spawn hook only.
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mam import registry
from mam.agents.inflight import TOKEN
from mam.plugin.records import Agent, BackendSpec, CallContext, Failure, ServerOutcome, ServerState, SpawnRequest
from mam.registry import Row, RowKey
from mam.registry.file import ENV_NAME
from mam.servers.app import App
from mam.servers.fanout import query_server
from mam.util.errors import MamError
from mam.util.masking import hide_values
from mam.util.progress import waiting
from mam.util.quote import shown

# Deferred imports (inside functions), for start-up: the kind library loads only when a spawn starts a kind.

POLL_INTERVAL = 0.05  # between the listings a launch polls until its agent shows
# What the last attempt at a row left: a re-spawn that replaces the row drops them.
STALE_FIELDS = ("terminated_at", "terminated_reason", "stopped_at", "adopted_at", "spawn_failed", "crash_loop_at",
                "stop_requested_at")


def agent_argv(agent: str | None, command: str | None, args: list[str]) -> tuple[str, ...]:
    if command is not None:
        try:
            words = shlex.split(command)
        except ValueError as exc:
            raise MamError("usage", f"--command {command!r}: {exc}") from None
        if not words:
            raise MamError("usage", "--command is empty")
        return (*words, *args)
    if agent is None:
        raise MamError("usage", "say which agent to run with --agent KIND, or any program with --command CMD")
    from mam.kinds.library import agent_programs

    programs = agent_programs()
    if agent not in programs:
        known = ", ".join(sorted(programs))
        raise MamError("usage", f"unknown agent kind {shown(agent)}: known are {known}",
                       hint="run any other agent with --command CMD")
    return (*programs[agent], *args)


def missing_program(program: str, env: Mapping[str, str], cwd: Path) -> str | None:
    """Why `program` cannot start in the agent's pane, or None. Looked up as it will be there: a path holding
    '/' from the agent's directory, a bare name on the PATH the agent gets (relative entries from that
    directory too)."""
    said = shown(program, quote="plain", cut="unmarked")
    if "/" in program:
        path = cwd / program
        if not path.exists():
            return f"no such program: {said}"
        if not path.is_file() or not os.access(path, os.X_OK):
            return f"not an executable program: {said}"
        return None
    entries = env.get("PATH", os.defpath).split(os.pathsep)
    search = os.pathsep.join(entry if os.path.isabs(entry) else str(cwd / entry) for entry in entries)
    return None if shutil.which(program, path=search) else f"no such program: {said}"


def _settle(key: RowKey, token: str, fields: dict[str, Any]) -> registry.Change:
    """Write a spawn's outcome to the row it claimed, and only while that row still carries its token."""

    def change(document: dict[str, Any], rows: tuple[Row, ...]) -> bool:
        row = next((r for r in rows if r.key == key), None)
        if row is None or row.raw.get(TOKEN) != token:
            return False
        for stale in STALE_FIELDS:  # e.g. a reconcile that saw the row before the agent was up
            row.raw.pop(stale, None)
        row.raw.update(fields)
        return True

    return change


UNSETTLED = "it stays registered as starting; `mam reconcile --apply` settles it from what its server lists"


def may_have_started(failure: Failure | None) -> bool:
    """A spawn call that timed out, was killed, or answered something unreadable may still have started the
    agent; one the backend refused (an error it printed, a missing binary) did not."""
    if failure is None:
        return False
    result = failure.result
    return (result.timed_out or (result.returncode is not None and result.returncode < 0)
            or failure.parse_error is not None)


def write_change(app: App, change: registry.Change) -> registry.Registry:
    return app.update_registry(change)


def _wait_listed(app: App, server: str, name: str, ctx: CallContext,
                 host: str = "", backend: str | None = None) -> tuple[Agent | None, ServerOutcome]:
    """Poll, bounded, until the server (of `backend`, else the selected one) lists `name`; the last outcome comes
    back for the caller to show."""
    deadline = time.monotonic() + app.bootstrap_wait
    while True:
        outcome = query_server(app.plugins, backend or app.backend_name, server, ctx, host or None)
        agent = next((a for a in outcome.agents if a.name == name), None)
        if agent is not None or time.monotonic() >= deadline:
            return agent, outcome
        time.sleep(POLL_INTERVAL)


ENV_NAME_HINT = "a variable name: letters, digits and _, not starting with a digit"


def env_assignments(app: App, names: list[str]) -> tuple[list[str], list[str]]:
    """`NAME=VALUE` for each of `names` the caller has set (its value now, unscrubbed: the user asked for it),
    and the names it has not set."""
    present, missing = [], []
    for name in names:
        if name in app.env:
            present.append(f"{name}={app.env[name]}")
        else:
            missing.append(name)
    return present, missing


def check_env_names(app: App, names: list[str]) -> list[str]:
    """`--env` names, refused when not a variable name or when the scrub removes them: a marker handed back to
    the agent would steer it (or its tools) to the wrong server."""
    removed = {d.name for d in app.server_plan.removed}
    seen: list[str] = []
    for name in names:
        if not ENV_NAME.fullmatch(name):
            raise MamError("usage", f"--env {shown(name, quote='plain', cut='unmarked')}: not {ENV_NAME_HINT}",
                           hint="--env takes a name only; mam passes your value of it")
        if name in removed:
            raise MamError("usage", f"--env {name}: the server scrub removes it (see `mam env`)",
                           hint="if it really must reach agents, keep it with `keep:` in your own config "
                                "($XDG_CONFIG_HOME/mam/config.yaml; a workspace's keeps no marker)")
        if name not in seen:
            seen.append(name)
    return seen


def with_env(argv: tuple[str, ...], assignments: list[str]) -> tuple[str, ...]:
    """The agent's argv with the variables it is to get, set by `env` (argv, never a shell). Assignments come
    after `--` (env reads a `--` after them as the program); a program named with '=' is refused by spawn."""
    if not assignments:
        return argv
    if "=" in argv[0]:
        program = shown(argv[0], quote="plain", cut="unmarked")
        raise MamError("usage", f"cannot pass --env to the program {program}: env would read a name holding '=' "
                       "as a variable", hint="rename the program, or run it by another path")
    return ("env", "--", *assignments, *argv)


def spawn_request(spec: BackendSpec, name: str, kind: str | None, cwd: str, argv: tuple[str, ...],
                  assignments: list[str]) -> SpawnRequest:
    """The request for `argv` with the variables of `assignments` (NAME=VALUE): handed to a backend that sets
    them itself (`spawn_env`), else put in front of the argv by `env`."""
    if spec.spawn_env:
        pairs = tuple((name_, value) for name_, _, value in (a.partition("=") for a in assignments))
        return SpawnRequest(name, kind, cwd, argv, env=pairs)
    return SpawnRequest(name, kind, cwd, with_env(argv, assignments))


def settler(app: App, key: RowKey, token: str) -> Any:
    def settle(fields: dict[str, Any]) -> Row | None:
        """The claimed row after the write; None when another command replaced it meanwhile."""
        row = write_change(app, _settle(key, token, fields)).find(key)
        return row if row is not None and row.raw.get(TOKEN) == token else None

    return settle


def launch(app: App, key: RowKey, token: str, request: SpawnRequest, ctx: CallContext, progress: bool,
           done: dict[str, Any] | None = None, assignments: list[str] | None = None,
           failed: dict[str, Any] | None = None) -> tuple[Row, ServerOutcome]:
    """Ask the backend to start the agent of the row claimed with `token`, wait until its server lists it, and
    write the outcome to that row only (with `done` on success, `failed` when it surely did not start). Raises
    with the reason when it did not start; the values of `assignments` (its --env NAME=VALUE) never stand in the
    reason."""
    backend_name, server, name, host = key
    backend = app.plugins.backend(backend_name)
    settle = settler(app, key, token)
    where = f"{backend_name} server {server}" + (f" on {host}" if host else "")
    with waiting(f"starting {name} on {where}", progress):
        result = app.plugins.spawn(backend, server, request, ctx)
    if not result.ok:
        detail = result.message
        if result.failure is not None:
            detail += ": " + app.plugins.classify(backend, result.failure).message
        detail = hide_values(detail, assignments or [])
        if result.unsettled or may_have_started(result.failure):  # never record as gone what may be running
            raise MamError("operation_failed", f"{backend_name} gave no clear answer to starting {name}: {detail}",
                           hint=UNSETTLED)
        settle({"status": "terminated", "terminated_at": registry.timestamp(), "terminated_reason": detail,
                **(failed or {})})
        raise MamError("operation_failed", f"{backend_name} did not start {name}: {detail}")
    with waiting(f"waiting for {where} to list {name}", progress):
        listed, outcome = _wait_listed(app, server, name, ctx, host, backend_name)
    if listed is None:
        if outcome.state is ServerState.UNKNOWN:
            reason = outcome.error.message if outcome.error else "no answer"
            raise MamError("operation_failed", f"{name} was started, but {where} could not be asked whether it "
                           f"runs: {reason}", hint=UNSETTLED)
        settle({"status": "terminated", "terminated_at": registry.timestamp(),
                "terminated_reason": "started, but its server never listed it", **(failed or {})})
        raise MamError("operation_failed", f"{name} was started but {where} does not list it (it may have exited "
                       "at once)")
    pane = {k: v for k, v in (("cwd", listed.cwd or request.cwd), ("id", listed.pane_id or result.pane_id))
            if v is not None}
    row = settle({"status": "running", "pane": pane, **(done or {})})
    if row is None:
        raise MamError("operation_failed", f"{name} was started on {where}, but another command changed its "
                       "registry row meanwhile; mam left that row as it is",
                       hint="`mam reconcile --apply` settles the row from what its server lists")
    return row, outcome
