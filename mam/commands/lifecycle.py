"""`mam spawn` and `mam stop`: start and stop agents through their backend, registered the moment they exist.

Backend-agnostic: the backend is reached through the spawn and stop hooks only.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mam import registry
from mam.agents import inflight
from mam.agents.inflight import TOKEN
from mam.agents.launch import (
    STALE_FIELDS,
    agent_argv,
    check_env_names,
    env_assignments,
    launch,
    missing_program,
    spawn_request,
    with_env,
    write_change,
)
from mam.agents.rows import rows_named, rows_on, session_entry
from mam.audit.trail import OUTCOMES, Entry, audited
from mam.calls import runner  # runner.run looked up at each call: the test kit's fake runner stands in
from mam.calls.route import remote_route
from mam.kinds.library import agent_programs
from mam.plugin.records import BackendSpec, CallContext, ServerState
from mam.registry import Row, RowKey
from mam.servers.app import App
from mam.servers.availability import require_binary
from mam.servers.bootstrap import start_server
from mam.servers.fanout import query_server
from mam.servers.hosts import checked_host, chosen_host, host_key
from mam.util.errors import MamError
from mam.util.names import check_name, check_utf8, is_utf8
from mam.util.progress import waiting
from mam.util.quote import shown

if TYPE_CHECKING:
    from mam.kinds.library import Library

# Deferred imports (inside functions), for start-up: spec signing, the runner and the quoting load only on the paths
# that use them.

# What belongs to the agent a row held before: a new spawn of the name records its own, or none.
RESPAWN_DROPS = ("agent_session", "restored_at", "restore_count", "restore_times", "exit_status", "exit_signal",
                 "last_output", "ended_at")


def default_server(app: App, server: str | None) -> str:
    return check_name(server or app.env.get("MAM_SERVER") or "mam", "server name")


def refuse_unkept_name(spec: BackendSpec, name: str) -> None:
    """A name mam accepts but the backend cannot keep (tmux turns '.' into '_') is bad input, refused before
    anything is written or started: the agent could never be found by it again."""
    reason = spec.name_rule(name) if spec.name_rule is not None else None
    if reason:
        raise MamError("invalid_name", reason, hint="pick another name")


def _append(document: dict[str, Any], key: RowKey, fields: dict[str, Any]) -> None:
    backend, server, name, host = key
    if document.get(registry.SESSIONS) is None:
        document[registry.SESSIONS] = []
    where = {"host": host} if host else {}
    document[registry.SESSIONS].append({"name": name, "backend": backend, "server": server, **where, **fields})


def _claim(key: RowKey, fields: dict[str, Any], blocked: list[Row]) -> registry.Change:
    """Take the row of `key` for one spawn attempt, under the lock, before the backend is asked: append it, or
    replace an inactive row of that key (its old outcome goes). An active row belongs to another attempt or a
    live agent: it is left as it is and lands in `blocked`."""

    def change(document: dict[str, Any], rows: tuple[Row, ...]) -> bool:
        row = next((r for r in rows if r.key == key), None)
        if row is not None and row.active:
            blocked.append(row)
            return False
        if row is not None:
            for stale in (*STALE_FIELDS, *RESPAWN_DROPS):
                row.raw.pop(stale, None)
            row.raw.update(fields)
        else:
            _append(document, key, fields)
        return True

    return change


def _taken(row: Row) -> MamError:
    return MamError("invalid_name", f"{row.name} is already registered as {row.status} on {row.backend} server "
                    f"{row.server}", hint=f"another `mam spawn` of it may be under way; if it is gone, "
                    f"`mam reconcile --apply` (or `mam stop {row.name}`) settles its row, then spawn it again")


def launch_spec(agent: str | None, command: str | None, args: list[str], cwd: str,
                env_names: list[str]) -> dict[str, Any]:
    """What a row keeps to start the agent again (docs/registry.md): never a variable's value."""
    spec: dict[str, Any] = {"kind": agent} if command is None else {"command": command}
    spec.update({"args": list(args), "cwd": cwd, "env_names": list(env_names)})
    return spec


def learned_session(library: Library, argv: tuple[str, ...], agent: str | None) -> str | None:
    """The agent's own session id when the arguments name it (`--session-id ID`, `--resume ID`)."""
    if not any(word.startswith("-") for word in argv[1:]):  # no option, no session id: skip reading the library
        return None
    kind = library.kind_of(argv, agent)
    return library.session_from_args(kind, argv[1:]) if kind else None


def check_label(app: App, agent: str) -> None:
    """`--agent KIND` beside `--command`: KIND says whose screen the program draws, so it must be a kind mam
    knows (shipped, or the workspace's own in .mam/states.yaml); a misspelt one would read no screen."""
    kinds = set(app.kinds.kinds)
    if agent not in kinds and agent not in agent_programs():
        known = ", ".join(sorted((kinds - {"generic"}) | set(agent_programs())))

        raise MamError("usage", f"unknown agent kind {shown(agent)}: known are {known}",
                       hint="add a kind of your own in .mam/states.yaml (docs/states.md), or leave --agent out")


def new_session(library: Library, argv: tuple[str, ...], agent: str | None,
                session: str) -> tuple[str | None, tuple[str, ...]]:
    """`session` (a fresh id) and the argv that starts the agent with it, when its kind has `new_session`
    (claude: `--session-id UUID`); else (None, argv) unchanged. The launch spec keeps the user's own arguments:
    restore resumes by the id, not by these options."""
    kind = library.kind_of(argv, agent)
    extra = library.new_session_args(kind, session)
    if extra is None or kind is None or Path(argv[0]).name not in library.kinds[kind].programs:
        return None, argv  # and a wrapper (npx, python -m) takes its own options where the kind's would go
    # Right after the program: before any argument of the user's, none of which can take them as its value.
    return session, (argv[0], *extra, *argv[1:])


def started_as(library: Library, argv: tuple[str, ...], agent: str | None,
               fresh: str) -> tuple[str | None, tuple[str, ...]]:
    """The session the agent runs (named in its arguments, else `fresh` when its kind takes one) and its argv."""
    session = learned_session(library, argv, agent)
    if session is not None:
        return session, argv
    return new_session(library, argv, agent, fresh)


def workspace_words(own: tuple[str, ...], agent: str | None, fresh: str,
                    argv: tuple[str, ...]) -> tuple[str, ...] | None:
    """The argv without the workspace's .mam/states.yaml, when `argv` (with it) is neither that nor the user's
    own `own`: the workspace put words into what runs (a kind's `new_session`, or `programs` that make another
    kind's apply), which need the user's consent (docs/trust.md). None when it changed nothing."""
    from mam.kinds.library import load_library

    _, trusted = started_as(load_library(None), own, agent, fresh)
    return None if argv in (trusted, own) else trusted


def workspace_program(app: App, agent: str | None) -> str | None:
    """The program `--agent KIND` runs when KIND is the workspace's own (.mam/states.yaml, with `programs`): the
    first of them, which the workspace chose (the spawn then needs the user's consent); None for a shipped agent
    or no --agent. A kind without programs (`generic`) names screen rules only: refused."""
    if agent is None or agent in agent_programs() or agent not in app.kinds.kinds:
        return None
    programs = app.kinds.kinds[agent].programs
    if not programs:
        raise MamError("usage", f"--agent {agent} alone: mam has no program to run for that kind",
                       hint=f"give the program with --command CMD (with --agent {agent}, its screen is read as "
                            f"{agent}'s)")
    return programs[0]


def _consent_to_words(name: str, entry: dict[str, Any], trust_spec: bool,
                      ask: Callable[[dict[str, Any]], bool] | None) -> None:
    """Go on with an argv holding the workspace's words only with the user's consent: --trust-spec, or a yes to
    `ask` (a terminal's question, never with --json); else refuse, before anything is written or started."""
    if trust_spec or (ask is not None and ask(entry)):
        return
    import shlex

    if "argv_without_workspace" not in entry:  # the workspace's kind chose the program itself
        raise MamError("operation_failed", f"{name}: its program is named by this workspace's .mam/states.yaml "
                       f"(a kind's programs), which no signature covers: not run; it would run "
                       f"`{shlex.join(entry['argv'])}`",
                       hint="read its argv, then the same `mam spawn` with --trust-spec runs it and signs it as "
                            "yours; or run the program you mean with --command", refusal=True)
    raise MamError("operation_failed", f"{name}: its argv holds words from this workspace's .mam/states.yaml, "
                   f"which no signature covers: not run; it would run `{shlex.join(entry['argv'])}`, without the "
                   f"workspace `{shlex.join(entry['argv_without_workspace'])}`",
                   hint="read its argv, then the same `mam spawn` with --trust-spec runs it and signs it as yours; "
                        "or take the kind's new_session (or programs) out of .mam/states.yaml", refusal=True)


def checked_directory(cwd: str | None) -> Path:
    directory = Path(cwd).resolve() if cwd else Path.cwd()
    try:
        str(directory).encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 arrive as surrogates; the registry holds UTF-8 only
        shown = os.fsencode(directory).decode("utf-8", "backslashreplace")
        raise MamError("usage", f"{'--cwd' if cwd else 'the working directory'} {shown}: not a UTF-8 path",
                       hint="rename the directory, or start the agent from one whose path is UTF-8") from None
    if not directory.is_dir():
        raise MamError("usage", f"--cwd {cwd}: not a directory")
    return directory


def remote_directory(app: App, cwd: str | None, host: str) -> Path:
    """The agent's directory on another host: given, absolute, and a directory there (asked there with
    `test -d`, through the route the caller entered; a path is an argument, never shell text)."""
    if not cwd or not cwd.startswith("/"):
        raise MamError("usage", f"an agent on {host} needs --cwd with an absolute path on that host",
                       hint="e.g. --cwd /home/me/repo")
    if not cwd.isprintable():  # NUL and every control character
        raise MamError("usage", f"--cwd {cwd!r}: not a path")
    result = runner.run(["test", "-d", cwd], timeout=app.timeout, env=app.backend_env)
    if result.transport_error is not None:
        raise MamError("operation_failed", f"could not ask {host} about --cwd {cwd}: {result.transport_error.message}")
    if result.returncode == 1:  # test's own "no"; anything else (ssh's 255, a time-out) is no answer about it
        raise MamError("usage", f"--cwd {cwd}: not a directory on {host}")
    if result.returncode != 0:
        said = "timed out" if result.returncode is None else f"exited {result.returncode}"
        raise MamError("operation_failed", f"could not ask {host} about --cwd {cwd}: ssh {said}",
                       hint="run the command again; if it goes on, check `ssh` to that host by hand")
    return Path(cwd)


@audited("spawn")
def spawn_document(app: App, name: str, *, agent: str | None, server: str | None, cwd: str | None,
                   command: str | None, args: list[str], env_names: list[str] | None = None,
                   progress: bool = False, host: str | None = None, trust_spec: bool = False,
                   ask: Callable[[dict[str, Any]], bool] | None = None,
                   worktree: str | None = None) -> dict[str, Any]:
    """`progress`: say on stderr, when it is a terminal, what a wait of more than a second waits for.
    `env_names`: variables whose current value the agent gets; the row records their names only.
    `host`: the SSH destination of the server (None: $MAM_HOST, else this machine).
    `trust_spec`: run an argv that holds words of the workspace's .mam/states.yaml; `ask`: asks the user about
    it, seeing its entry (argv, the argv without the workspace, cwd, env_names); without either it is refused.
    `worktree`: start it in a git worktree of its own on this branch ("" for mam/NAME; mam.agents.worktrees)."""
    check_name(name, "agent name")
    server = default_server(app, server)
    there = chosen_host(app, host)
    route = app.route(there)
    with remote_route(route):
        if worktree is None:
            return _spawn(app, name, agent, server, cwd, command, args, env_names, progress, there, trust_spec, ask)
        from mam.agents import worktrees

        # Held from before the worktree is made until its row is claimed: a `mam worktree remove` of the name
        # never sees a worktree without its row, nor a row without its folder.
        with worktrees.name_lock(app.workspace.dot_mam, name):
            return _spawn(app, name, agent, server, cwd, command, args, env_names, progress, there, trust_spec, ask,
                          worktree or worktrees.default_branch(name))


def _spawn(app: App, name: str, agent: str | None, server: str, cwd: str | None, command: str | None,
           args: list[str], env_names: list[str] | None, progress: bool, there: str, trust_spec: bool = False,
           ask: Callable[[dict[str, Any]], bool] | None = None, branch: str | None = None) -> dict[str, Any]:
    chosen = workspace_program(app, agent) if command is None else None
    for value, what in ((agent, "--agent"), (command, "--command"), *((a, "argument") for a in args)):
        if value is not None:
            check_utf8(value, what)
    argv = (chosen, *args) if chosen is not None else agent_argv(agent, command, args)
    if command is not None and agent is not None:
        check_label(app, agent)  # before anything is asked, here or on another host
    names = check_env_names(app, env_names or [])
    assignments, unset = env_assignments(app, names)
    for assignment in assignments:  # the value is never shown: it may be a secret
        if not is_utf8(assignment):
            raise MamError("usage", f"--env {assignment.partition('=')[0]}: its value is not UTF-8 text",
                           hint="set it as UTF-8, or leave that --env out")
    if unset:
        raise MamError("usage", f"--env {', '.join(unset)}: not set in this environment",
                       hint="set it, or leave that --env out")
    with_env(argv, assignments)  # a program it cannot pass them to is refused before anything starts
    directory = checked_directory(cwd) if not there else remote_directory(app, cwd, there)
    if branch is not None:  # bad input (no repository, a branch git refuses) is refused before anything is made
        from mam.agents import worktrees

        base_dir = str(directory if cwd or there else app.workspace.root)
        worktrees.check_branch(base_dir, branch, app.timeout, app.backend_env)
        worktrees.repository(base_dir, app.timeout, app.backend_env)
    backend = app.plugins.backend(app.backend_name)
    spec = app.plugins.spec(app.backend_name)
    refuse_unkept_name(spec, name)
    app.plugins.require(backend, "spawn")  # refuse before any server is started for nothing
    # The program is looked up where the agent will run: here only (on another host, a program that is not
    # there ends at once, which the backend's start reports with its exit status).
    missing = missing_program(argv[0], app.server_env, directory) if spec.program_check and not there else None
    if missing is not None:  # else the pane would die at once, or never show its agent
        raise MamError("usage", missing, hint="install it or put it on PATH, or give its path with --command")
    # The kind takes an id for a new conversation: mam picks one, for restore to resume.
    import uuid

    own, fresh = argv, str(uuid.uuid4())
    session, argv = started_as(app.kinds, own, agent, fresh)  # a bad .mam/states.yaml is refused here
    without = workspace_words(own, agent, fresh, argv) if chosen is None else None
    if without is not None or chosen is not None:
        entry = {"name": name, "backend": app.backend_name, "server": server, "host": there or None,
                 "spec_trust": "workspace_argv" if chosen is None else "workspace_program", "argv": list(argv),
                 "cwd": str(directory), "env_names": names}
        if without is not None:
            entry["argv_without_workspace"] = list(without)
        _consent_to_words(name, entry, trust_spec, ask)
    key = (app.backend_name, server, name, there)
    known = app.load_registry().find(key)  # an invalid registry is refused before anything starts
    from mam.agents import specsign

    spec_key = specsign.load_key(app.env, create=True)  # an unusable key file too (docs/trust.md)
    ctx = CallContext(timeout=app.timeout, env=app.server_env)
    where = f"{app.backend_name} server {server}" + (f" on {there}" if there else "")
    with waiting(f"asking {where} for its agents", progress):
        outcome = query_server(app.plugins, app.backend_name, server, ctx, there or None)
    require_binary(app, outcome.error.kind if outcome.error else None, "mam spawn needs it")
    if any(a.name == name for a in outcome.agents):
        raise MamError("invalid_name", f"{name} is already running on {where}",
                       hint="pick another name, or `mam stop` it first")
    if known is not None and known.active:  # refused before a server is started for nothing
        raise _taken(known)
    if outcome.state is not ServerState.UP:
        if not app.autostart:
            # Sending the spawn anyway could start the server as a side effect (tmux new-session does).
            detail = outcome.error.message if outcome.error else outcome.state.value
            raise MamError("operation_failed", f"{where} is not up ({detail}) and MAM_NO_AUTOSTART=1",
                           hint=f"start it with `mam --backend {app.backend_name} bootstrap --server {server}`",
                           refusal=True)
        with waiting(f"starting {where}", progress):
            start_server(app, server, there or None)
    kind = agent or Path(argv[0]).name
    token = secrets.token_hex(8)
    blocked: list[Row] = []
    made: dict[str, Any] | None = None
    created: list[bool] = []  # [new branch?] when this spawn made the worktree (not reused)
    if branch is not None:
        made = worktrees.make(base_dir, name, branch, app.timeout, app.backend_env, local=not there,
                              registered=_signed_worktree(app, known), created=created)
        directory = Path(made["path"])
    # A workspace kind's program is kept as the command it was: restore starts it without the workspace's file.
    recorded = launch_spec(agent, command if chosen is None else chosen, args, str(directory), names)
    if made is not None:
        recorded["worktree"] = made
    assert spec_key is not None
    signature = specsign.sign(spec_key, specsign.row_fields(name, app.backend_name, server, there, kind, session),
                              recorded)  # restore runs the spec only while it is what this spawn wrote
    fields: dict[str, Any] = {"status": "starting", "agent": kind, "pane": {"cwd": str(directory)},
                              "spec": recorded, specsign.FIELD: signature,
                              "created_at": registry.timestamp(), TOKEN: token}
    if session is not None:
        fields["agent_session"] = session
    inflight.hold(app.workspace.dot_mam, token)  # from before the claim until the outcome is written
    try:
        try:
            write_change(app, _claim(key, fields, blocked))
            if blocked:  # another spawn of this name got the row first: leave it and its agent alone
                raise _taken(blocked[0])
        except MamError:
            if made is not None and created:  # no row will record it: a worktree left here would block the name
                worktrees.unmake(made, created[0], app.timeout, app.backend_env)
            raise
        from mam.hooks.report import identity  # the hooks' `mam report` learns whose state it says (docs/hooks.md)

        request = spawn_request(spec, name, kind, str(directory), argv,
                                assignments + identity(spec.spawn_env, bool(there), name, app.workspace.dot_mam))
        # A start that surely failed leaves `spawn_failed`: `restore --all` does not retry what never ran.
        row, outcome = launch(app, key, token, request, ctx, progress, assignments=assignments,
                              failed={"spawn_failed": True})
    finally:
        inflight.release(token)
    doc: dict[str, Any] = {"schema": 1, "session": session_entry(row, outcome)}
    if made is not None:
        doc["worktree"] = made
    return doc


def _signed_worktree(app: App, row: Row | None) -> dict[str, Any] | None:
    """The worktree the row of this name records, when this user's mam signed it: the only one a spawn reuses."""
    if row is None or row.spec is None or not isinstance(row.spec.get("worktree"), dict):
        return None
    from mam.agents.worktrees import signature_of

    return row.spec["worktree"] if signature_of(app, row) == "signed" else None


@audited("stop")
def stop_document(app: App, name: str, server: str | None, *, force: bool = False,
                  progress: bool = False, host: str | None = None) -> dict[str, Any]:
    """Close `name` and mark its row. A name with no row here is refused unless `force`, which asks the
    backend anyway (on `server`, else the default server; on `host`, else this machine)."""
    check_name(name, "agent name")
    if server is not None:
        check_name(server, "server name")
    host = checked_host(host)
    reg = app.load_registry()
    rows = rows_named(app, reg, name, server, host)
    there = (rows[0].host or "") if rows else host_key(host)
    with remote_route(app.route(there)):
        return _stop(app, name, server, force, progress, reg, rows, there)


def _stop(app: App, name: str, server: str | None, force: bool, progress: bool, reg: registry.Registry,
          rows: list[Row], there: str) -> dict[str, Any]:
    """`force`: the user named this agent with --force: ask the backend without a row, and close a pane or
    session of that name that mam did not make. The stop is recorded in the row before the close
    (mam.commands.stopping), so a row that cannot be written afterwards is still never restored by --all."""
    from mam.agents.stopping import LeftRunning, drop_intent, record_intent, record_outcome

    backend_name = rows[0].backend if rows else app.backend_name  # the row says which backend it is on
    refuse_unkept_name(app.plugins.spec(backend_name), name)
    target = rows[0].server if rows else default_server(app, server)
    if not rows and not force:
        where = f" on {backend_name} server {server}" if server is not None else ""
        raise MamError("operation_failed", f"{name} is not registered here{where} ({reg.path})",
                       hint=f"`mam --backend {backend_name} stop --force {name} --server {target}` asks that "
                            "server anyway", refusal=True)
    backend = app.plugins.backend(backend_name)
    app.plugins.require(backend, "stop")  # a backend that cannot stop must not get the row marked terminated
    ctx = CallContext(timeout=app.timeout, env=app.backend_env)
    on = f" on {there}" if there else ""
    seen = record_intent(app, rows[0], f"{backend_name} server {target}{on}") if rows else None
    with waiting(f"closing {name} on {backend_name} server {target}{on}", progress):
        result = app.plugins.stop(backend, target, name, ctx, force=force)
    if seen is not None and (result.failure is not None or result.foreign):
        drop_intent(app, rows[0].key, seen)  # nothing was closed: the row says what it said before
    if result.failure is not None:
        error = app.plugins.classify(backend, result.failure)
        require_binary(app, error.kind, "mam stop needs it", backend_name, of_row=bool(rows))
        raise MamError("operation_failed", f"could not stop {name}: {result.message}: {error.message}")
    if result.foreign:
        kept = "its registry row is left as it was" if rows else "there is no row of it here"
        raise LeftRunning("operation_failed", f"{result.message}; {kept}",
                          hint=f"`mam stop {name} --force` closes it all the same"
                               + (f"; `mam forget {name} --force` drops the row and leaves it running" if rows
                                  else ""))
    status = "stopped" if result.stopped else "terminated"
    if rows and not result.stopped and not rows[0].active:
        status = rows[0].status or status  # already recorded as not running: nothing more to change
    elif rows and seen is not None:
        fields: dict[str, Any] = {"status": status, "stopped_at": registry.timestamp()}
        if not result.stopped:
            fields["terminated_reason"] = result.message
        what = f"{name} on {backend_name} server {target}: " + (
            f"stopped ({result.message})" if result.stopped else result.message)
        record_outcome(app, rows[0].key, seen, fields, name, what)
    return {"schema": 1, "name": name, "backend": backend_name, "server": target, "host": there or None,
            "status": status, "registered": bool(rows), "message": result.message}


def stop_targets(app: App, server: str | None = None, host: str | None = None) -> list[Row]:
    """The rows `mam stop --all` closes: every active row (running or starting) of the explicit backend (else of
    every backend), on `server` and `host` when given, in registry order."""
    if server is not None:
        check_name(server, "server name")
    return [row for row in rows_on(app, app.load_registry(), server, checked_host(host)) if row.active]


def _each_stopped(doc: dict[str, Any]) -> list[Entry]:
    """The audit trail's line per agent of stop --all: failed, or ok with its outcome (left: not mam's pane)."""
    return [(a["name"], OUTCOMES.get(a["outcome"], "failed"), f"{a['outcome']}: {a['message']}")
            for a in doc["agents"]]


@audited("stop", agent=lambda bound: ",".join(r.name for r in bound["rows"]) or None, each=_each_stopped)
def stop_all_document(app: App, rows: list[Row], progress: bool = False) -> dict[str, Any]:
    """Close each of `rows` (stop_targets) as `mam stop NAME` closes one, and mark it. One that fails is told
    in its entry and the others are still stopped; one whose pane or session mam did not make is `left`."""
    from mam.agents.stopping import LeftRunning

    reg = app.load_registry()
    agents: list[dict[str, Any]] = []
    for row in rows:
        there = row.host or ""
        entry = {"name": row.name, "backend": row.backend, "server": row.server, "host": row.host}
        try:
            with remote_route(app.route(there)):
                doc = _stop(app, row.name, row.server, False, progress, reg, [row], there)
            entry.update({"outcome": doc["status"], "message": doc["message"]})
        except LeftRunning as exc:  # not mam's: --all never closes it (only `mam stop NAME --force` does)
            entry.update({"outcome": "left", "message": exc.message})
        except MamError as exc:
            entry.update({"outcome": "failed", "message": exc.message})
        agents.append(entry)
    counts = {outcome: sum(1 for a in agents if a["outcome"] == outcome) for outcome in ("stopped", "terminated",
                                                                                          "failed", "left")}
    return {"schema": 1, "agents": agents, "counts": counts}
