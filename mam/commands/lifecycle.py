"""`mam spawn` and `mam stop`: start and stop agents through their backend, registered the moment they exist.

Backend-agnostic: the backend is reached through the spawn and stop hooks only.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mam import inflight, registry
from mam.app import App
from mam.commands.rows import rows_named, snapshot, unchanged_rows
from mam.commands.status import checked_host, host_key, session_entry
from mam.errors import MamError
from mam.inflight import TOKEN
from mam.names import check_name
from mam.plugin.records import Agent, BackendSpec, CallContext, Failure, ServerOutcome, ServerState, SpawnRequest
from mam.progress import waiting
from mam.registry import Row, RowKey
from mam.registry.file import ENV_NAME
from mam.runner import remote_route
from mam.servers import query_server, require_binary, start_server

# The executable of each agent kind mam knows; anything else runs with --command.
AGENT_COMMANDS: dict[str, tuple[str, ...]] = {
    "claude": ("claude",), "codex": ("codex",), "gemini": ("gemini",), "opencode": ("opencode",),
    "grok": ("grok",), "hermes": ("hermes",), "cursor": ("cursor-agent",), "copilot": ("copilot",),
    "qwen": ("qwen",), "amp": ("amp",), "goose": ("goose",), "crush": ("crush",), "aider": ("aider",),
}
POLL_INTERVAL = 0.05
# The row a spawn claims carries this token: its later writes go only to a row that still holds it.
# What the last attempt at a row left: a re-spawn that replaces the row drops them.
STALE_FIELDS = ("terminated_at", "terminated_reason", "stopped_at", "adopted_at", "spawn_failed", "crash_loop_at")
# What belongs to the agent a row held before: a new spawn of the name records its own, or none.
RESPAWN_DROPS = ("agent_session", "restored_at", "restore_count", "restore_times", "exit_status", "exit_signal",
                 "last_output", "ended_at")


def default_server(app: App, server: str | None) -> str:
    return check_name(server or app.env.get("MAM_SERVER") or "mam", "server name")


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
    if agent not in AGENT_COMMANDS:
        known = ", ".join(sorted(AGENT_COMMANDS))
        from mam.registry.yamlio import brief

        raise MamError("usage", f"unknown agent kind {brief(agent)}: known are {known}",
                       hint="run any other agent with --command CMD")
    return (*AGENT_COMMANDS[agent], *args)


def refuse_unkept_name(spec: BackendSpec, name: str) -> None:
    """A name mam accepts but the backend cannot keep (tmux turns '.' into '_') is bad input, refused before
    anything is written or started: the agent could never be found by it again."""
    reason = spec.name_rule(name) if spec.name_rule is not None else None
    if reason:
        raise MamError("invalid_name", reason, hint="pick another name")


def _shown(text: str) -> str:
    return text if text.isprintable() and len(text) <= 80 else repr(text[:80])


def missing_program(program: str, env: Mapping[str, str], cwd: Path) -> str | None:
    """Why `program` cannot start in the agent's pane, or None. Looked up as it will be there: a path holding
    '/' from the agent's directory, a bare name on the PATH the agent gets (relative entries from that
    directory too)."""
    if "/" in program:
        path = cwd / program
        if not path.exists():
            return f"no such program: {_shown(program)}"
        if not path.is_file() or not os.access(path, os.X_OK):
            return f"not an executable program: {_shown(program)}"
        return None
    entries = env.get("PATH", os.defpath).split(os.pathsep)
    search = os.pathsep.join(entry if os.path.isabs(entry) else str(cwd / entry) for entry in entries)
    return None if shutil.which(program, path=search) else f"no such program: {_shown(program)}"


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


def _taken(row: Row) -> MamError:
    return MamError("invalid_name", f"{row.name} is already registered as {row.status} on {row.backend} server "
                    f"{row.server}", hint=f"another `mam spawn` of it may be under way; if it is gone, "
                    f"`mam reconcile --apply` (or `mam stop {row.name}`) settles its row, then spawn it again")


UNSETTLED = "it stays registered as starting; `mam reconcile --apply` settles it from what its server lists"


def may_have_started(failure: Failure | None) -> bool:
    """A spawn call that timed out, was killed, or answered something unreadable may still have started the
    agent; one the backend refused (an error it printed, a missing binary) did not."""
    if failure is None:
        return False
    result = failure.result
    return (result.timed_out or (result.returncode is not None and result.returncode < 0)
            or failure.parse_error is not None)


def _if_unchanged(seen: Row, fields: dict[str, Any], written: list[bool]) -> registry.Change:
    """Update the row `seen` only while it is still exactly as it was read: a row another command rewrote
    meanwhile (a re-spawn, a reconcile) is theirs."""
    before = {seen.key: snapshot(seen)}

    def change(document: dict[str, Any], rows: tuple[Row, ...]) -> bool:
        for row in unchanged_rows(rows, before):
            row.raw.update(fields)
            written.append(True)
        return bool(written)

    return change


def _write(app: App, change: registry.Change) -> registry.Registry:
    return registry.update(app.workspace.registry_path, app.row_default_backend, change)


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
            raise MamError("usage", f"--env {_shown(name)}: not {ENV_NAME_HINT}",
                           hint="--env takes a name only; mam passes your value of it")
        if name in removed:
            raise MamError("usage", f"--env {name}: the server scrub removes it (see `mam env`)",
                           hint="keep it with `keep:` in .mam/config.yaml if it really must reach agents")
        if name not in seen:
            seen.append(name)
    return seen


def with_env(argv: tuple[str, ...], assignments: list[str]) -> tuple[str, ...]:
    """The agent's argv with the variables it is to get, set by `env` (argv, never a shell). Assignments come
    after `--` (env reads a `--` after them as the program); a program named with '=' is refused by spawn."""
    if not assignments:
        return argv
    if "=" in argv[0]:
        raise MamError("usage", f"cannot pass --env to the program {_shown(argv[0])}: env would read a name "
                       "holding '=' as a variable", hint="rename the program, or run it by another path")
    return ("env", "--", *assignments, *argv)


def spawn_request(spec: BackendSpec, name: str, kind: str | None, cwd: str, argv: tuple[str, ...],
                  assignments: list[str]) -> SpawnRequest:
    """The request for `argv` with the variables of `assignments` (NAME=VALUE): handed to a backend that sets
    them itself (`spawn_env`), else put in front of the argv by `env`."""
    if spec.spawn_env:
        pairs = tuple((name_, value) for name_, _, value in (a.partition("=") for a in assignments))
        return SpawnRequest(name, kind, cwd, argv, env=pairs)
    return SpawnRequest(name, kind, cwd, with_env(argv, assignments))


def launch_spec(agent: str | None, command: str | None, args: list[str], cwd: str,
                env_names: list[str]) -> dict[str, Any]:
    """What a row keeps to start the agent again (docs/registry.md): never a variable's value."""
    spec: dict[str, Any] = {"kind": agent} if command is None else {"command": command}
    spec.update({"args": list(args), "cwd": cwd, "env_names": list(env_names)})
    return spec


def learned_session(app: App, argv: tuple[str, ...], agent: str | None) -> str | None:
    """The agent's own session id when the arguments name it (`--session-id ID`, `--resume ID`)."""
    if not any(word.startswith("-") for word in argv[1:]):  # no option, no session id: skip reading the library
        return None
    kind = app.kinds.kind_of(argv, agent)
    return app.kinds.session_from_args(kind, argv[1:]) if kind else None


def check_label(app: App, agent: str) -> None:
    """`--agent KIND` beside `--command`: KIND says whose screen the program draws, so it must be a kind mam
    knows (shipped, or the workspace's own in .mam/states.yaml); a misspelt one would read no screen."""
    kinds = set(app.kinds.kinds)
    if agent not in kinds and agent not in AGENT_COMMANDS:
        known = ", ".join(sorted((kinds - {"generic"}) | set(AGENT_COMMANDS)))
        from mam.registry.yamlio import brief

        raise MamError("usage", f"unknown agent kind {brief(agent)}: known are {known}",
                       hint="add a kind of your own in .mam/states.yaml (docs/states.md), or leave --agent out")


def new_session(app: App, argv: tuple[str, ...], agent: str | None) -> tuple[str | None, tuple[str, ...]]:
    """A fresh session id and the argv that starts the agent with it, when its kind has `new_session` (claude:
    `--session-id UUID`); else (None, argv) unchanged. The launch spec keeps the user's own arguments: restore
    resumes by the id, not by these options."""
    library = app.kinds
    kind = library.kind_of(argv, agent)
    import uuid

    session = str(uuid.uuid4())
    extra = library.new_session_args(kind, session)
    if extra is None or kind is None or Path(argv[0]).name not in library.kinds[kind].programs:
        return None, argv  # and a wrapper (npx, python -m) takes its own options where the kind's would go
    # Right after the program: before any argument of the user's, none of which can take them as its value.
    return session, (argv[0], *extra, *argv[1:])


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
    from mam.runner import run

    result = run(["test", "-d", cwd], timeout=app.timeout, env=app.backend_env)
    if result.transport_error is not None:
        raise MamError("operation_failed", f"could not ask {host} about --cwd {cwd}: {result.transport_error.message}")
    if result.returncode == 1:  # test's own "no"; anything else (ssh's 255, a time-out) is no answer about it
        raise MamError("usage", f"--cwd {cwd}: not a directory on {host}")
    if result.returncode != 0:
        said = "timed out" if result.returncode is None else f"exited {result.returncode}"
        raise MamError("operation_failed", f"could not ask {host} about --cwd {cwd}: ssh {said}",
                       hint="run the command again; if it goes on, check `ssh` to that host by hand")
    return Path(cwd)


def settler(app: App, key: RowKey, token: str) -> Any:
    def settle(fields: dict[str, Any]) -> Row | None:
        """The claimed row after the write; None when another command replaced it meanwhile."""
        row = _write(app, _settle(key, token, fields)).find(key)
        return row if row is not None and row.raw.get(TOKEN) == token else None

    return settle


HIDDEN = "***"
MIN_HIDDEN = 3  # shorter values (a flag like "1") are no secrets, and hiding them would garble every message
MIN_FRAGMENT = 8  # a piece of a value this long is hidden too: a backend may have cut or wrapped the value


def hide_values(text: str, assignments: list[str]) -> str:
    """`text` with the value of each `--env` assignment (NAME=VALUE) written as ***: a backend's error, or the
    last line an agent printed as it died, may quote one, and the registry keeps only variable names. What was
    cut or wrapped before it came here (a line cut at its end, a multi-line value's first line) leaves a piece
    of the value: any run of MIN_FRAGMENT or more characters that stands in a value is hidden as well."""
    values = [v for v in (a.partition("=")[2] for a in assignments) if len(v) >= MIN_HIDDEN]
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, HIDDEN)
    pieces = [v for v in values if len(v) >= MIN_FRAGMENT]
    if not pieces:
        return text
    out, i = [], 0
    while i < len(text):
        length = _longest_piece(text, i, pieces)
        if length >= MIN_FRAGMENT:
            out.append(HIDDEN)
            i += length
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _longest_piece(text: str, start: int, values: list[str]) -> int:
    """The length of the longest run of `text` from `start` that one of `values` holds. Holding is monotone
    (a value that holds a run holds its beginning), so the length is found by bisection."""
    low, high = 0, len(text) - start
    while low < high:
        middle = (low + high + 1) // 2
        if any(text[start:start + middle] in value for value in values):
            low = middle
        else:
            high = middle - 1
    return low


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


def spawn_document(app: App, name: str, *, agent: str | None, server: str | None, cwd: str | None,
                   command: str | None, args: list[str], env_names: list[str] | None = None,
                   progress: bool = False, host: str | None = None) -> dict[str, Any]:
    """`progress`: say on stderr, when it is a terminal, what a wait of more than a second waits for.
    `env_names`: variables whose current value the agent gets; the row records their names only.
    `host`: the SSH destination of the server (None: $MAM_HOST, else this machine)."""
    check_name(name, "agent name")
    server = default_server(app, server)
    there = host_key(checked_host(host if host is not None else app.env.get("MAM_HOST") or None))
    route = app.route(there)
    with remote_route(route):
        return _spawn(app, name, agent, server, cwd, command, args, env_names, progress, there)


def _spawn(app: App, name: str, agent: str | None, server: str, cwd: str | None, command: str | None,
           args: list[str], env_names: list[str] | None, progress: bool, there: str) -> dict[str, Any]:
    if command is None and agent is not None and agent not in AGENT_COMMANDS and agent in app.kinds.kinds:
        # a kind of the library (`generic`, one of .mam/states.yaml) names screen rules, not a program to run
        raise MamError("usage", f"--agent {agent} alone: mam has no program to run for that kind",
                       hint=f"give the program with --command CMD (with --agent {agent}, its screen is read as "
                            f"{agent}'s)")
    argv = agent_argv(agent, command, args)
    if command is not None and agent is not None:
        check_label(app, agent)  # before anything is asked, here or on another host
    names = check_env_names(app, env_names or [])
    assignments, unset = env_assignments(app, names)
    if unset:
        raise MamError("usage", f"--env {', '.join(unset)}: not set in this environment",
                       hint="set it, or leave that --env out")
    with_env(argv, assignments)  # a program it cannot pass them to is refused before anything starts
    directory = checked_directory(cwd) if not there else remote_directory(app, cwd, there)
    backend = app.plugins.backend(app.backend_name)
    spec = app.plugins.spec(app.backend_name)
    refuse_unkept_name(spec, name)
    app.plugins.require(backend, "spawn")  # refuse before any server is started for nothing
    # The program is looked up where the agent will run: here only (on another host, a program that is not
    # there ends at once, which the backend's start reports with its exit status).
    missing = missing_program(argv[0], app.server_env, directory) if spec.program_check and not there else None
    if missing is not None:  # else the pane would die at once, or never show its agent
        raise MamError("usage", missing, hint="install it or put it on PATH, or give its path with --command")
    session = learned_session(app, argv, agent)  # a bad .mam/states.yaml is refused before anything starts
    if session is None:  # the kind takes an id for a new conversation: mam picks one, for restore to resume
        session, argv = new_session(app, argv, agent)
    key = (app.backend_name, server, name, there)
    known = app.load_registry().find(key)  # an invalid registry is refused before anything starts
    from mam import specsign

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
        if app.env.get("MAM_NO_AUTOSTART") == "1":
            # Sending the spawn anyway could start the server as a side effect (tmux new-session does).
            detail = outcome.error.message if outcome.error else outcome.state.value
            raise MamError("operation_failed", f"{where} is not up ({detail}) and MAM_NO_AUTOSTART=1",
                           hint=f"start it with `mam --backend {app.backend_name} bootstrap --server {server}`")
        with waiting(f"starting {where}", progress):
            start_server(app, server, there or None)
    kind = agent or Path(argv[0]).name
    token = secrets.token_hex(8)
    blocked: list[Row] = []
    recorded = launch_spec(agent, command, args, str(directory), names)
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
        _write(app, _claim(key, fields, blocked))
        if blocked:  # another spawn of this name got the row first: leave it and its agent alone
            raise _taken(blocked[0])
        request = spawn_request(spec, name, kind, str(directory), argv, assignments)
        # A start that surely failed leaves `spawn_failed`: `restore --all` does not retry what never ran.
        row, outcome = launch(app, key, token, request, ctx, progress, assignments=assignments,
                              failed={"spawn_failed": True})
    finally:
        inflight.release(token)
    return {"schema": 1, "session": session_entry(row, outcome)}


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
    backend_name = rows[0].backend if rows else app.backend_name  # the row says which backend it is on
    refuse_unkept_name(app.plugins.spec(backend_name), name)
    target = rows[0].server if rows else default_server(app, server)
    if not rows and not force:
        where = f" on {backend_name} server {server}" if server is not None else ""
        raise MamError("operation_failed", f"{name} is not registered here{where} ({reg.path})",
                       hint=f"`mam --backend {backend_name} stop --force {name} --server {target}` asks that "
                            "server anyway")
    backend = app.plugins.backend(backend_name)
    app.plugins.require(backend, "stop")  # a backend that cannot stop must not get the row marked terminated
    ctx = CallContext(timeout=app.timeout, env=app.backend_env)
    on = f" on {there}" if there else ""
    with waiting(f"closing {name} on {backend_name} server {target}{on}", progress):
        result = app.plugins.stop(backend, target, name, ctx)
    if result.failure is not None:
        error = app.plugins.classify(backend, result.failure)
        require_binary(app, error.kind, "mam stop needs it", backend_name, of_row=bool(rows))
        raise MamError("operation_failed", f"could not stop {name}: {result.message}: {error.message}")
    status = "stopped" if result.stopped else "terminated"
    if rows and not result.stopped and not rows[0].active:
        status = rows[0].status or status  # already recorded as not running: nothing to change
    elif rows:
        fields: dict[str, Any] = {"status": status, "stopped_at": registry.timestamp()}
        if not result.stopped:
            fields["terminated_reason"] = result.message
        written: list[bool] = []
        _write(app, _if_unchanged(rows[0], fields, written))
        if not written:
            raise MamError("operation_failed", f"{name} on {backend_name} server {target}: {result.message}, "
                           "but another command changed its registry row meanwhile; mam left that row as it is",
                           hint="`mam status` shows what it says now")
    return {"schema": 1, "name": name, "backend": backend_name, "server": target, "host": there or None,
            "status": status, "registered": bool(rows), "message": result.message}
