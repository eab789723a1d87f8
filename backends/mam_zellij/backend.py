"""Driving zellij (0.44). Its exit codes lie, so every answer is read from its text."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from mam.api import (
    NAME_PATTERN,
    Agent,
    BootstrapContext,
    BootstrapResult,
    CallContext,
    CommandResult,
    ErrorKind,
    Failure,
    PaneCapture,
    SendResult,
    ServerError,
    SpawnRequest,
    SpawnResult,
    StopResult,
    find_for_stop,
    open_text_log,
    parse_or_failure,
    poll_until,
    run,
)
from mam_zellij.plugin import MARKERS  # declared once, in the BackendSpec

T = TypeVar("T")

EXECUTABLE = "zellij"
NO_SESSIONS = "No active zellij sessions found."
# Parsed from the right: names may contain spaces.
_LINE = re.compile(r"^(?P<name>.*) \[Created (?P<age>.+?) ago\] ?"
                   r"(?P<flag>\(current\)|\(EXITED - attach to resurrect\))?\s*$")
_NOT_FOUND = ("There is no active session!", "Session '", "No session with the name", "No session named",
              "Session: \"")
POLL_INTERVAL = 0.05
# A new agent is watched this long: a program that ends within it "exited at once", and its spawn fails with
# the reason instead of leaving a row that says running.
EXIT_WINDOW = 0.3


def client_env(env: Mapping[str, str]) -> dict[str, str]:
    """Without these, "(current)" can never hide "(EXITED ...)" and no call follows the caller's session."""
    return {k: v for k, v in env.items() if k not in MARKERS}


def parse_sessions(stdout: str, stderr: str) -> dict[str, bool]:
    """`list-sessions -n`: session name -> alive. Raises ValueError on text it does not know.

    zellij lets a session name hold a newline, so a name can forge whole lines (`vic [Created ...] (EXITED ...)`).
    Names are unique, so a name listed twice means forged lines: the whole answer is refused, never read."""
    if (stderr.strip() == NO_SESSIONS and not stdout.strip()) or (stdout.strip() == NO_SESSIONS and not stderr.strip()):
        return {}
    if stderr.strip():
        raise ValueError(f"zellij said: {stderr.strip().splitlines()[0][:120]}")
    if not stdout.strip():
        raise ValueError("empty session listing without zellij's no-session message")
    sessions: dict[str, bool] = {}
    for line in stdout.split("\n"):  # only "\n" ends a line: a name may hold "\r" (splitlines would cut there)
        if not line.strip():
            continue
        match = _LINE.match(line)
        if match is None:
            raise ValueError(f"unexpected line in zellij list-sessions: {line[:80]!r}")
        if match["name"] in sessions:
            raise ValueError(f"zellij list-sessions names {match['name'][:80]!r} twice")
        sessions[match["name"]] = match["flag"] is None or match["flag"] == "(current)"
    return sessions


def _is_agent_pane(title: object, command: object) -> bool:
    """An agent is a pane someone named (`zellij run --name NAME`). zellij titles the others after their
    command or path (`/bin/bash`), so a session's own shell pane, made when mam started the session, is no
    agent and never shows up as drift."""
    if not isinstance(title, str) or not NAME_PATTERN.fullmatch(title):
        return False
    program = command.split()[0].rsplit("/", 1)[-1] if isinstance(command, str) and command.strip() else ""
    return title != program


def pane_list(stdout: str) -> list[dict[str, Any]]:
    panes = json.loads(stdout)
    if not isinstance(panes, list):
        raise ValueError("list-panes did not print a JSON list")
    if not all(isinstance(pane, dict) for pane in panes):
        raise ValueError("a pane entry is not an object")
    return panes


def held(panes: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The panes titled `name` whose program has ended: zellij holds a command pane, showing its exit code."""
    return [p for p in panes if p.get("title") == name and p.get("exited") and not p.get("is_plugin")
            and p.get("id") is not None]


def parse_panes(stdout: str) -> tuple[Agent, ...]:
    agents = []
    for pane in pane_list(stdout):
        if pane.get("exited") or pane.get("is_plugin"):
            continue
        title = pane.get("title")
        command = pane.get("pane_command")
        cwd = pane.get("pane_cwd")
        if not _is_agent_pane(title, command):
            continue
        assert isinstance(title, str)
        agents.append(Agent(name=title,
                            agent=command.split()[0].rsplit("/", 1)[-1] if isinstance(command, str) and command
                            else None,
                            cwd=cwd if isinstance(cwd, str) else None,
                            pane_id=str(pane["id"]) if pane.get("id") is not None else None))
    return tuple(agents)


class ZellijBackend:
    name = "zellij"

    def _run(self, args: list[str], *, timeout: float, env: Mapping[str, str], cwd: str | None = None) -> CommandResult:
        return run([EXECUTABLE, *args], timeout=timeout, env=client_env(env), cwd=cwd)

    def _sessions(self, server: str, timeout: float,
                  env: Mapping[str, str]) -> tuple[dict[str, bool], CommandResult] | Failure:
        result = self._run(["list-sessions", "-n"], timeout=timeout, env=env)
        if result.returncode is None:
            return Failure(self.name, server, result)
        try:
            return parse_sessions(result.stdout, result.stderr), result
        except ValueError as exc:
            return Failure(self.name, server, result, parse_error=str(exc))

    def list_agents(self, server: str, ctx: CallContext) -> tuple[Agent, ...] | Failure:
        sessions = self._sessions(server, ctx.timeout, ctx.env)
        if isinstance(sessions, Failure):
            return sessions
        if not sessions[0].get(server, False):
            return Failure(self.name, server, sessions[1])  # classify reads the listing again: down
        return self._list_panes(server, ctx, parse_panes)

    def _list_panes(self, server: str, ctx: CallContext, parse: Callable[[str], T]) -> T | Failure:
        result = self._run(["--session", server, "action", "list-panes", "--json"], timeout=ctx.timeout,
                           env=ctx.env)
        if any(marker in result.stdout + result.stderr for marker in _NOT_FOUND):
            return Failure(self.name, server, result)  # exit 0 or not: zellij's exit codes lie
        return parse_or_failure(self.name, server, result, parse)

    def classify(self, failure: Failure) -> ServerError | None:
        """Down only when zellij's own session listing parses and shows the session not live."""
        result = failure.result
        if result.argv[1:] != ("list-sessions", "-n") or failure.parse_error is not None:
            return None
        try:
            sessions = parse_sessions(result.stdout, result.stderr)
        except ValueError:
            return None
        if failure.server in sessions and sessions[failure.server]:
            return None
        state = "exited (resurrectable)" if failure.server in sessions else "not running"
        return ServerError(ErrorKind.SERVER_DOWN, f"zellij session {failure.server} is {state}")

    def version(self, ctx: CallContext) -> str | None:
        result = self._run(["--version"], timeout=ctx.timeout, env=ctx.env)
        return result.stdout.strip() or None if result.returncode == 0 else None

    def client_argv(self, server: str, args: list[str]) -> list[str]:
        return [EXECUTABLE, "--session", server, *args]

    def bootstrap(self, server: str, ctx: BootstrapContext) -> BootstrapResult:
        sessions = self._sessions(server, ctx.timeout, ctx.env)
        if isinstance(sessions, Failure):
            return BootstrapResult(False, False, "could not tell whether the session runs", failure=sessions)
        if sessions[0].get(server):
            return BootstrapResult(False, True, f"zellij session {server} is already running")
        # The log first: a log mam refuses (a planted link) must fail the bootstrap before a session runs.
        ctx.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open_text_log(ctx.log_path) as log:
            # The server daemonizes and inherits this environment: ctx.env is already scrubbed.
            result = self._run(["attach", "--create-background", server], timeout=ctx.timeout, env=ctx.env,
                               cwd=str(ctx.cwd))
            log.write(result.stdout + result.stderr)
        already = "Session already exists" in result.stderr
        if result.returncode != 0 and not already:
            return BootstrapResult(True, False, "zellij attach --create-background failed",
                                   failure=Failure(self.name, server, result))
        def up() -> bool | None:
            sessions = self._sessions(server, ctx.timeout, ctx.env)
            return True if not isinstance(sessions, Failure) and sessions[0].get(server) else None

        if poll_until(up, wait=ctx.wait, interval=POLL_INTERVAL):
            return BootstrapResult(not already, True, f"started zellij session {server}")
        return BootstrapResult(True, False, f"zellij session {server} did not come up within {ctx.wait:g} s")

    def spawn(self, server: str, request: SpawnRequest, ctx: CallContext) -> SpawnResult:
        # A new pane titled NAME runs argv directly (zellij run, documented for 0.44+); the pane inherits the
        # server's environment, which mam scrubbed when it started the session.
        result = self._run(["--session", server, "run", "--name", request.name, "--cwd", request.cwd, "--",
                            *request.argv], timeout=ctx.timeout, env=ctx.env, cwd=request.cwd)
        text = result.stdout + result.stderr
        if result.returncode != 0 or any(marker in text for marker in _NOT_FOUND) or NO_SESSIONS in text:
            return SpawnResult(False, "zellij run failed", failure=Failure(self.name, server, result))
        ended = self._watch(server, request.name, ctx)
        if ended is not None:
            self._close(server, ended, ctx)  # the held pane would show as a second pane of that name
            status = ended.get("exit_status")
            how = f"exited at once with status {status}" if isinstance(status, int) else "exited at once"
            return SpawnResult(False, f"{os.path.basename(request.argv[0])!r} {how}")
        return SpawnResult(True, f"started {request.name} in zellij session {server}")

    def _watch(self, server: str, name: str, ctx: CallContext) -> dict[str, Any] | None:
        """The newest pane titled `name` (the one just made: ids only grow) when its program ended within
        EXIT_WINDOW; None while it runs, or when zellij could not tell (the core's listing decides then)."""
        def exited() -> dict[str, Any] | Failure | None:
            panes = self._list_panes(server, ctx, pane_list)
            if isinstance(panes, Failure):
                return panes
            ours = max((p for p in panes if p.get("title") == name and not p.get("is_plugin")
                        and isinstance(p.get("id"), int)), key=lambda p: int(p["id"]), default=None)
            return ours if ours is not None and ours.get("exited") else None

        found = poll_until(exited, wait=EXIT_WINDOW, interval=POLL_INTERVAL)
        return found if isinstance(found, dict) else None

    def _close(self, server: str, pane: dict[str, Any], ctx: CallContext) -> CommandResult:
        return self._run(["--session", server, "action", "close-pane", "--pane-id", f"terminal_{pane['id']}"],
                         timeout=ctx.timeout, env=ctx.env)

    def stop(self, server: str, name: str, ctx: CallContext) -> StopResult:
        agent = find_for_stop(self, server, name, ctx)
        if isinstance(agent, StopResult):
            if agent.failure is None:
                # Not running (or down): a pane zellij holds after its program ended is closed all the same.
                panes = self._list_panes(server, ctx, pane_list)
                gone = held(panes, name) if not isinstance(panes, Failure) else []
                for pane in gone:
                    self._close(server, pane, ctx)
                if gone:
                    return StopResult(False, f"{name} had exited in zellij session {server}; its held pane is "
                                             "closed")
            return agent
        result = self._run(["--session", server, "action", "close-pane", "--pane-id", f"terminal_{agent.pane_id}"],
                           timeout=ctx.timeout, env=ctx.env)
        text = result.stdout + result.stderr
        if result.returncode != 0 or text.strip():  # success is silent; any text is a failure
            return StopResult(False, "zellij close-pane failed", failure=Failure(self.name, server, result))
        return StopResult(True, f"closed zellij pane terminal_{agent.pane_id}")

    def capture_panes(self, server: str, agents: tuple[Agent, ...],
                      ctx: CallContext) -> dict[str, PaneCapture] | Failure:
        """One `action dump-screen --pane-id` per agent (zellij runs one action per call), its visible screen on
        stdout. zellij knows neither when a pane last changed nor whether anyone looked at it: its captures carry
        no activity and no seen fact, so its agents are `idle`, never `done`, and a working screen is never
        judged stale. A pane zellij cannot dump is left out (`unknown`)."""
        out: dict[str, PaneCapture] = {}
        for agent in agents:
            if agent.name is None or agent.pane_id is None or not agent.pane_id.isdigit():
                continue
            result = self._run(["--session", server, "action", "dump-screen", "--pane-id",
                                f"terminal_{agent.pane_id}"], timeout=ctx.timeout, env=ctx.env)
            text = result.stdout + result.stderr
            if any(marker in text for marker in _NOT_FOUND) or NO_SESSIONS in text:
                return Failure(self.name, server, result)  # the session went away: the whole answer is void
            if result.returncode != 0 or result.stderr.strip():
                continue
            out[agent.name] = PaneCapture(text=result.stdout)
        return out

    def send_text(self, server: str, agent: Agent, text: str, enter: bool, ctx: CallContext) -> SendResult:
        """`write-chars` types `text` as characters (no key names); Enter is byte 13 by `write`."""
        if agent.pane_id is None or not agent.pane_id.isdigit():
            return SendResult(False, f"zellij gave no pane id for {agent.name}")
        pane = f"terminal_{agent.pane_id}"
        calls = ([["write-chars", "--pane-id", pane, "--", text]] if text else []) + (
            [["write", "--pane-id", pane, "13"]] if enter else [])
        for call in calls:
            result = self._run(["--session", server, "action", *call], timeout=ctx.timeout, env=ctx.env)
            if result.returncode != 0 or (result.stdout + result.stderr).strip():  # success is silent
                return SendResult(False, f"zellij {call[0]} failed", failure=Failure(self.name, server, result))
        return SendResult(True, f"sent {len(text)} characters to {agent.name}" + (" and Enter" if enter else ""))
