"""Driving tmux (reference/tmux.md). Every call has `-L NAME`; every query has `-N`, so none starts a server."""

from __future__ import annotations

import re
from collections.abc import Mapping

from mam import runner
from mam.model import (
    Agent,
    BootstrapContext,
    BootstrapResult,
    CallContext,
    CommandResult,
    ErrorKind,
    Failure,
    ServerError,
    SpawnRequest,
    SpawnResult,
    StopResult,
)

EXECUTABLE = "tmux"
SEP = "\x1f"  # unit separator: tmux escapes it in names, but paths arrive raw, so the path comes last
# The session that holds an otherwise empty server up. Its leading "_" is not a valid mam name, so it can
# never be confused with an agent; it is never listed.
KEEPALIVE = "_mam_keepalive"
FIELDS = ("session_id", "session_name", "window_index", "pane_index", "pane_id", "pane_pid", "@mam_agent",
          "pane_current_path")
LIST_FORMAT = SEP.join("#{" + f + "}" for f in FIELDS)
# A record starts where a line holds every field before the path in its exact shape. Names and our own
# option can hold neither a newline nor the separator (tmux escapes control characters in names), so only a
# path crafted to look like a whole record could be misread; a plain newline or separator in it never is.
_RECORD_START = re.compile(
    rf"^\$\d+{SEP}[^{SEP}\n]*{SEP}\d+{SEP}\d+{SEP}%\d+{SEP}\d+{SEP}[^{SEP}\n]*{SEP}", re.MULTILINE)

# The first line of stderr when no server runs (reference/tmux.md); everything else is not "down".
_DOWN = (
    re.compile(r"^no server running on "),
    re.compile(r"^error connecting to .* \(No such file or directory\)$"),
    re.compile(r"^server exited unexpectedly$"),
    re.compile(r"^lost server$"),
)
_PERMISSION = re.compile(r"^error connecting to .* \(Permission denied\)$")


def base_argv(server: str, *, query: bool, env: Mapping[str, str]) -> list[str]:
    argv = [EXECUTABLE]
    if query:
        argv.append("-N")
    argv += ["-L", server]
    config = env.get("MAM_TMUX_CONFIG")
    if config:  # for tests and for users who want servers without their ~/.tmux.conf
        argv += ["-f", config]
    return argv


def client_env(env: Mapping[str, str]) -> dict[str, str]:
    """tmux follows $TMUX to the enclosing server; never let it."""
    return {k: v for k, v in env.items() if k not in ("TMUX", "TMUX_PANE")}


def parse_panes(stdout: str) -> tuple[Agent, ...]:
    """One agent per session: its first pane. A path holding newlines or the separator stays in its record."""
    starts = [m.start() for m in _RECORD_START.finditer(stdout)]
    if stdout.strip() and (not starts or starts[0] != 0):
        raise ValueError("listing does not start with a session id")
    firsts: dict[str, tuple[tuple[int, int], Agent]] = {}
    order: list[str] = []
    for begin, end in zip(starts, [*starts[1:], len(stdout)], strict=True):
        record = stdout[begin:end]
        if record.endswith("\n"):
            record = record[:-1]
        parts = record.split(SEP, len(FIELDS) - 1)
        if len(parts) != len(FIELDS):
            continue  # a malformed record must not break the listing of the whole server
        sid, name, window, pane, pane_id, _pid, kind, path = parts
        if name == KEEPALIVE:
            continue
        try:
            position = (int(window), int(pane))
        except ValueError:
            continue
        agent = Agent(name=name, agent=kind or None, cwd=path or None, pane_id=pane_id or None)
        if sid not in firsts:
            order.append(sid)
            firsts[sid] = (position, agent)
        elif position < firsts[sid][0]:
            firsts[sid] = (position, agent)
    return tuple(firsts[sid][1] for sid in order)


def classify_stderr(stderr: str) -> ServerError | None:
    first = next((line.strip() for line in stderr.splitlines() if line.strip()), "")
    if any(p.match(first) for p in _DOWN):
        return ServerError(ErrorKind.SERVER_DOWN, first)
    if _PERMISSION.match(first):
        return ServerError(ErrorKind.PERMISSION, first)
    return None


def escape_separator(arg: str) -> str:
    """tmux reads an argument ending in ';' as a command separator; a backslash before it keeps it literal."""
    return arg[:-1] + "\\;" if arg.endswith(";") else arg


class TmuxBackend:
    name = "tmux"

    def _run(self, server: str, args: list[str], *, timeout: float, env: Mapping[str, str], query: bool = True,
             cwd: str | None = None) -> CommandResult:
        argv = base_argv(server, query=query, env=env) + args
        return runner.run(argv, timeout=timeout, env=client_env(env), cwd=cwd)

    def list_agents(self, server: str, ctx: CallContext) -> tuple[Agent, ...] | Failure:
        result = self._run(server, ["list-panes", "-a", "-F", LIST_FORMAT], timeout=ctx.timeout, env=ctx.env)
        return runner.parse_or_failure(self.name, server, result, parse_panes)

    def classify(self, failure: Failure) -> ServerError | None:
        if failure.result.returncode in (None, 0):
            return None
        return classify_stderr(failure.result.stderr)

    def version(self, ctx: CallContext) -> str | None:
        result = runner.run([EXECUTABLE, "-V"], timeout=ctx.timeout, env=client_env(ctx.env))
        return result.stdout.strip() or None if result.returncode == 0 else None

    def _probe(self, server: str, ctx: BootstrapContext) -> bool | Failure:
        """True when up, False when tmux said it is down, a Failure when it could not tell."""
        result = self._run(server, ["list-sessions", "-F", "#{session_id}"], timeout=ctx.timeout, env=ctx.env)
        if result.returncode == 0:
            return True
        error = classify_stderr(result.stderr) if result.returncode is not None else None
        if error is not None and error.kind is ErrorKind.SERVER_DOWN:
            return False
        return Failure(self.name, server, result)

    def bootstrap(self, server: str, ctx: BootstrapContext) -> BootstrapResult:
        state = self._probe(server, ctx)
        if isinstance(state, Failure):
            return BootstrapResult(False, False, "could not tell whether the server runs", failure=state)
        if state:
            return BootstrapResult(False, True, f"tmux server {server} is already running")
        # The server copies the environment of the client that starts it: ctx.env is already scrubbed.
        result = self._run(server, ["new-session", "-d", "-s", KEEPALIVE, "-x", "80", "-y", "24"],
                           timeout=ctx.timeout, env=ctx.env, query=False, cwd=str(ctx.cwd))
        ctx.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(ctx.log_path, "a", encoding="utf-8") as log:
            log.write(result.stdout + result.stderr)
        # `new-session -d` can exit 0 while failing: any stderr is a failure.
        if result.returncode != 0 or result.stderr.strip():
            return BootstrapResult(True, False, "tmux new-session failed", failure=Failure(self.name, server, result))
        confirm = self._run(server, ["has-session", "-t", "=" + KEEPALIVE], timeout=ctx.timeout, env=ctx.env)
        if confirm.returncode != 0:
            return BootstrapResult(True, False, "the new tmux server does not answer",
                                   failure=Failure(self.name, server, confirm))
        return BootstrapResult(True, True, f"started tmux server {server}")

    def client_argv(self, server: str, args: list[str]) -> list[str]:
        return [EXECUTABLE, "-L", server, *args]

    def spawn(self, server: str, request: SpawnRequest, ctx: CallContext) -> SpawnResult:
        if "." in request.name:
            # tmux 3.2-3.6 rewrite "." in session names to "_": the agent would never be found by its name.
            return SpawnResult(False, f"tmux cannot keep the name {request.name!r}: use one without '.'")
        # A pane gets the server's global environment, copied when the server started. A server mam did not
        # start may hold markers: unset, for this agent, whatever the server has that ctx.env does not.
        leftovers = self._server_only_variables(server, ctx)
        if isinstance(leftovers, Failure):
            return SpawnResult(False, "could not read the server's environment", failure=leftovers)
        argv = list(request.argv)
        if leftovers:
            argv = ["env", *(part for name in leftovers for part in ("-u", name)), "--", *argv]
        args = ["new-session", "-d", "-s", request.name, "-c", request.cwd, "-P", "-F", "#{pane_id}", "--",
                *(escape_separator(arg) for arg in argv)]
        if request.agent:
            # In the same invocation, so the kind is there before anyone lists the session; without -t it
            # applies to the session just made.
            args += [";", "set-option", "@mam_agent", request.agent]
        result = self._run(server, args, timeout=ctx.timeout, env=ctx.env, query=False, cwd=request.cwd)
        if result.returncode != 0 or result.stderr.strip():
            return SpawnResult(False, "tmux refused the new session", failure=Failure(self.name, server, result))
        return SpawnResult(True, f"started {request.name} on tmux server {server}",
                           pane_id=result.stdout.strip() or None)

    def _server_only_variables(self, server: str, ctx: CallContext) -> list[str] | Failure:
        result = self._run(server, ["show-environment", "-g"], timeout=ctx.timeout, env=ctx.env)
        if result.returncode != 0:
            return Failure(self.name, server, result)
        names = []
        for line in result.stdout.splitlines():
            name = line.split("=", 1)[0]
            if "=" in line and name not in ctx.env and name not in ("TMUX", "TMUX_PANE") and name.isidentifier():
                names.append(name)
        return sorted(names)

    def stop(self, server: str, name: str, ctx: CallContext) -> StopResult:
        result = self._run(server, ["kill-session", "-t", "=" + name], timeout=ctx.timeout, env=ctx.env)
        if result.returncode == 0:
            return StopResult(True, f"closed tmux session {name}")
        first = result.stderr.strip().splitlines()[0] if result.stderr.strip() else ""
        down = classify_stderr(result.stderr)
        if first.startswith("can't find session") or (down is not None and down.kind is ErrorKind.SERVER_DOWN):
            return StopResult(False, f"{name} was not running on tmux server {server}")
        return StopResult(False, "tmux could not close the session", failure=Failure(self.name, server, result))
