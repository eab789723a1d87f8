"""Driving zellij (0.44, 0.45). Its exit codes say little, so every answer is read from its text."""

from __future__ import annotations

import json
import os
import re
import time
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
    Remains,
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
    sent_message,
)
from mam_zellij import MARKERS  # declared once, for the BackendSpec (plugin.py) and the backend

T = TypeVar("T")

EXECUTABLE = "zellij"
NO_SESSIONS = "No active zellij sessions found."
# The release lines mam is tested against (docs/backends.md, Supported versions): 0.44.x is the oldest with
# `list-panes --json` and `run` printing the pane id; 0.45.1 is the real zellij under the tests.
SUPPORTED = ((0, 44), (0, 45))
# Parsed from the right: names may contain spaces.
_LINE = re.compile(r"^(?P<name>.*) \[Created (?P<age>.+?) ago\] ?"
                   r"(?P<flag>\(current\)|\(EXITED - attach to resurrect\))?\s*$")
_NOT_FOUND = ("There is no active session!", "Session '", "No session with the name", "No session named",
              "Session: \"")
POLL_INTERVAL = 0.05
# Why a pane's screen was not read: its dump alone printed more than one answer may hold. Each pane is dumped by a
# call of its own, so no pane can make another one's unread.
TOO_MUCH = "its screen printed more than one answer may hold ($MAM_MAX_OUTPUT), so it was not read"
# A new agent is watched this long: a program that ends within it "exited at once", and its spawn fails with
# the reason instead of leaving a row that says running.
EXIT_WINDOW = 0.3
# How often a listing that came back empty (zellij let a busy server's client go) is asked in all.
LISTING_TRIES = 3
# How long a `run` that printed no pane id (zellij's own 1 s wait for the action passed) is given to show its pane.
NEW_PANE_WAIT = 5.0


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


def running(pane: dict[str, Any]) -> bool:
    """A terminal pane whose program runs: not a plugin, not held. zellij holds a command pane whose program
    ended (`exited`, with its `exit_status`) and one a resurrected session brought back suspended (`is_held`,
    not `exited`: nothing runs until someone presses Enter in it)."""
    return (not pane.get("is_plugin") and not pane.get("exited") and not pane.get("is_held")
            and isinstance(pane.get("id"), int) and not isinstance(pane.get("id"), bool))


def _is_agent_pane(pane: dict[str, Any]) -> bool:
    """An agent is a command pane someone named (`zellij run --name NAME`: no title its program sets replaces
    that name, and a resurrected session keeps it). A
    shell pane (no `terminal_command`: the session's first pane `terminal_0`, titled `Pane #1` or whatever its
    shell sets) is never one, nor a pane zellij titles after its command: an unnamed pane's title is its whole
    command line, exactly `terminal_command` (zellij-server pty.rs), so an agent named after its program
    (`claude`, running `claude --session-id ...`) is one."""
    title, command = pane.get("title"), pane.get("terminal_command")
    if not isinstance(title, str) or not NAME_PATTERN.fullmatch(title):
        return False
    if not isinstance(command, str) or not command.strip():
        return False
    return title != command


def pane_list(stdout: str) -> list[dict[str, Any]]:
    panes = json.loads(stdout)
    if not isinstance(panes, list):
        raise ValueError("list-panes did not print a JSON list")
    if not all(isinstance(pane, dict) for pane in panes):
        raise ValueError("a pane entry is not an object")
    return panes


def titled(panes: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The terminal panes titled `name`, whoever named them."""
    return [p for p in panes if p.get("title") == name and not p.get("is_plugin") and p.get("id") is not None]


def held(panes: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The panes mam named `name` (agent panes: never a shell's, nor one titled after its command) that zellij
    holds: their program ended (it shows the exit code) or a resurrected session brought them back suspended."""
    return [p for p in titled(panes, name) if _is_agent_pane(p) and (p.get("exited") or p.get("is_held"))]


def pane_by_id(panes: list[dict[str, Any]], pane_id: str) -> dict[str, Any] | None:
    return next((p for p in panes if not p.get("is_plugin") and str(p.get("id")) == pane_id), None)


def parse_panes(stdout: str) -> tuple[Agent, ...]:
    """The agents of a pane listing. zellij does not know an agent's kind: `pane_command` is whatever process
    runs in the pane now, read from the OS (`node`, `python3` for a script agent, absent when the read is
    slow), so `agent` stays None and the row's kind is used."""
    agents = []
    for pane in pane_list(stdout):
        if not running(pane) or not _is_agent_pane(pane):
            continue
        cwd = pane.get("pane_cwd")
        agents.append(Agent(name=str(pane["title"]), cwd=cwd if isinstance(cwd, str) else None,
                            pane_id=str(pane["id"])))
    return tuple(agents)


_RUN_ID = re.compile(r"terminal_(\d+)\n?")


def is_supported(version: str) -> bool:
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", version)
    return found is not None and (int(found[1]), int(found[2])) in SUPPORTED


class ZellijBackend:
    name = "zellij"
    pastes_lines = True  # send_text takes a text of several lines and sends it as one paste

    def _run(self, args: list[str], *, timeout: float, env: Mapping[str, str], cwd: str | None = None) -> CommandResult:
        result = run([EXECUTABLE, *args], timeout=timeout, env=client_env(env), cwd=cwd)
        # A call that names its session first asks every session's server whether it is alive; a busy server can
        # miss that check, and zellij then says no session runs and sends nothing (seen on 0.45 under load). Ask
        # again, twice at most: a session that is really gone still says so, and is then read as before.
        for _ in range(2):
            if not (args[:1] == ["--session"] and result.returncode == 1 and not result.stdout
                    and result.stderr.strip() == "There is no active session!"):
                break
            time.sleep(0.2)
            result = run([EXECUTABLE, *args], timeout=timeout, env=client_env(env), cwd=cwd)
        return result

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
        """The session's panes. zellij gives an action 1 s (zellij-server route.rs ACTION_COMPLETION_TIMEOUT);
        past it the client is let go and prints nothing, exit 0: a busy server's silence is no answer, and a
        listing is asked again (at most LISTING_TRIES times) before it is a failure."""
        for _ in range(LISTING_TRIES):
            result = self._run(["--session", server, "action", "list-panes", "--json"], timeout=ctx.timeout,
                               env=ctx.env)
            if result.returncode != 0 or result.stdout.strip() or result.stderr.strip():
                break
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

    def supported(self, version: str) -> bool:
        """Whether `zellij --version`'s line names a release mam is tested against (docs/backends.md)."""
        return is_supported(version)

    def client_argv(self, server: str, args: list[str]) -> list[str]:
        return [EXECUTABLE, "--session", server, *args]

    def attach_argv(self, server: str, agent: Agent, outer: Mapping[str, str], tty: str | None) -> list[str]:
        return [EXECUTABLE, "attach", server]

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
            """Listed, and its layout has made its first pane: a `run` before that takes `terminal_0` and may
            print no pane id."""
            sessions = self._sessions(server, ctx.timeout, ctx.env)
            if isinstance(sessions, Failure) or not sessions[0].get(server):
                return None
            panes = self._list_panes(server, CallContext(timeout=ctx.timeout, env=ctx.env), pane_list)
            return True if not isinstance(panes, Failure) and any(not p.get("is_plugin") for p in panes) else None

        if poll_until(up, wait=ctx.wait, interval=POLL_INTERVAL):
            if server in sessions[0]:  # listed EXITED: zellij resurrected it, its command panes suspended
                return BootstrapResult(not already, True, f"resurrected exited zellij session {server}: its command "
                                       "panes come back suspended, not running, until each is started again")
            return BootstrapResult(not already, True, f"started zellij session {server}")
        return BootstrapResult(True, False, f"zellij session {server} did not come up within {ctx.wait:g} s")

    def spawn(self, server: str, request: SpawnRequest, ctx: CallContext) -> SpawnResult:
        # A held pane of that name (its program ended, or a resurrected session brought it back suspended, to run
        # again at the first Enter) is closed first: it would be a second copy of the agent.
        if request.name == " ".join(request.argv):
            # Named exactly as zellij would title the pane unnamed: never told apart from a pane someone else ran.
            return SpawnResult(False, f"an agent on zellij cannot be named exactly as its command line "
                                      f"({request.name!r}): pick another name")
        panes = self._list_panes(server, ctx, pane_list)
        closed = held(panes, request.name) if not isinstance(panes, Failure) else []
        for pane in closed:
            self._close(server, str(pane["id"]), ctx)
        # A new pane runs argv directly (zellij run, 0.44+), and zellij prints its id. The pane inherits the
        # server's environment, which mam scrubbed when it started the session.
        result = self._run(["--session", server, "run", "--name", request.name, "--cwd", request.cwd, "--",
                            *request.argv], timeout=ctx.timeout, env=ctx.env, cwd=request.cwd)
        text = result.stdout + result.stderr
        made = _RUN_ID.fullmatch(result.stdout)
        if result.returncode != 0 or any(marker in text for marker in _NOT_FOUND) or NO_SESSIONS in text:
            return SpawnResult(False, "zellij run failed", failure=Failure(self.name, server, result))
        pane_id = made[1] if made is not None and not result.stderr.strip() else None
        if pane_id is None and not text.strip():
            # zellij waits 1 s for the action; a busy server finishes it later, and `run` prints nothing: the new
            # pane is the one of that name that was not there before (`--name` names it for good).
            before = ({str(p.get("id")) for p in panes if not p.get("is_plugin")}
                      if not isinstance(panes, Failure) else None)
            pane_id = self._new_pane(server, request.name, before, ctx)
        if pane_id is None:
            return SpawnResult(False, "zellij run did not print the new pane's id",
                               failure=Failure(self.name, server, result, parse_error="no terminal_N on stdout"))
        ended = self._watch(server, pane_id, ctx)
        if ended is not None:
            self._close(server, pane_id, ctx)  # the held pane would show as a second pane of that name
            status = ended.get("exit_status")
            how = f"exited at once with status {status}" if isinstance(status, int) else "exited at once"
            return SpawnResult(False, f"{os.path.basename(request.argv[0])!r} {how}")
        message = f"started {request.name} in zellij session {server} (pane terminal_{pane_id})"
        if closed:
            message += f"; closed its held pane{'s' if len(closed) > 1 else ''} " + ", ".join(
                f"terminal_{p['id']}" for p in closed)
        return SpawnResult(True, message, pane_id=pane_id)

    def _new_pane(self, server: str, name: str, before: set[str] | None, ctx: CallContext) -> str | None:
        """The id of the terminal pane titled `name` that is not among `before`, once zellij lists it."""
        if before is None:
            return None

        def made() -> str | None:
            panes = self._list_panes(server, ctx, pane_list)
            if isinstance(panes, Failure):
                return None
            new = [p for p in panes if not p.get("is_plugin") and p.get("title") == name
                   and isinstance(p.get("id"), int) and str(p["id"]) not in before]
            return str(new[0]["id"]) if len(new) == 1 else None

        found = poll_until(made, wait=min(ctx.timeout, NEW_PANE_WAIT), interval=POLL_INTERVAL)
        return found if isinstance(found, str) else None

    def _watch(self, server: str, pane_id: str, ctx: CallContext) -> dict[str, Any] | None:
        """Pane `pane_id` (the one just made) when its program ended within EXIT_WINDOW; None while it runs,
        or when zellij could not tell (the core's listing decides then)."""
        def exited() -> dict[str, Any] | Failure | None:
            panes = self._list_panes(server, ctx, pane_list)
            if isinstance(panes, Failure):
                return panes
            ours = pane_by_id(panes, pane_id)
            return ours if ours is not None and ours.get("exited") else None

        found = poll_until(exited, wait=EXIT_WINDOW, interval=POLL_INTERVAL)
        return found if isinstance(found, dict) else None

    def _close(self, server: str, pane_id: str, ctx: CallContext) -> CommandResult:
        return self._run(["--session", server, "action", "close-pane", "--pane-id", f"terminal_{pane_id}"],
                         timeout=ctx.timeout, env=ctx.env)

    def _pane_now(self, server: str, pane_id: str, ctx: CallContext) -> dict[str, Any] | None | Failure:
        """Pane `pane_id` as zellij lists it now; None when it is gone. zellij's actions on a pane that does not
        exist exit 0 and print nothing, so only a listing tells whether one reached its pane."""
        panes = self._list_panes(server, ctx, pane_list)
        return panes if isinstance(panes, Failure) else pane_by_id(panes, pane_id)

    def stop(self, server: str, name: str, ctx: CallContext, force: bool = False) -> StopResult:
        """Close the pane mam named `name`. A pane titled `name` that mam did not name (a shell's, one titled
        after its command) is someone else's: left open, unless `force` (the user named it)."""
        agent = find_for_stop(self, server, name, ctx, force)
        if isinstance(agent, StopResult):
            if agent.failure is None and not agent.foreign:
                # Not running (or down): a pane zellij holds after its program ended is closed all the same.
                panes = self._list_panes(server, ctx, pane_list)
                return agent if isinstance(panes, Failure) else self._stop_unlisted(server, name, panes, force,
                                                                                    agent, ctx)
            return agent
        return self._close_checked(server, agent.pane_id or "", ctx)

    def _stop_unlisted(self, server: str, name: str, panes: list[dict[str, Any]], force: bool, answer: StopResult,
                       ctx: CallContext) -> StopResult:
        """`name` is not a live agent: close its held panes; say of a pane titled `name` that mam did not name
        that it is left open (closed with `force`, when it is the only one)."""
        gone = held(panes, name)
        for pane in gone:
            self._close(server, str(pane["id"]), ctx)
        if gone:
            return StopResult(False, f"{name} was not running in zellij session {server}; its held pane is closed")
        others = titled(panes, name)
        if not others:
            return answer
        if force and len(others) == 1:
            return self._close_checked(server, str(others[0]["id"]), ctx)
        ids = ", ".join(f"terminal_{p['id']}" for p in others)
        why = "more than one, so none is closed" if force else "left open"
        return StopResult(False, f"zellij pane {ids} in session {server} is titled {name} but was not named by mam "
                                 f"(a shell's pane, or one titled after its command): {why}", foreign=True)

    def _close_checked(self, server: str, pane_id: str, ctx: CallContext) -> StopResult:
        """Close pane `pane_id` and make sure it went: zellij's close-pane says nothing either way."""
        result = self._close(server, pane_id, ctx)
        text = result.stdout + result.stderr
        if result.returncode != 0 or text.strip():  # success is silent; any text is a failure
            return StopResult(False, "zellij close-pane failed", failure=Failure(self.name, server, result))
        after = self._pane_now(server, pane_id, ctx)
        if isinstance(after, Failure):
            return StopResult(False, "zellij could not be asked whether the pane closed", failure=after)
        if after is not None:
            return StopResult(False, f"zellij pane terminal_{pane_id} is still there after close-pane")
        return StopResult(True, f"closed zellij pane terminal_{pane_id}")

    def capture_panes(self, server: str, agents: tuple[Agent, ...],
                      ctx: CallContext) -> dict[str, PaneCapture] | Failure:
        """One `action dump-screen --pane-id` per agent (zellij runs one action per call), its visible screen on
        stdout, then one listing: zellij dumps a pane that does not exist as an empty line, so a pane the listing
        after the dumps does not show running is left out (`unknown`), never read as a screen (ids are never
        reused: a pane listed after its dump was there during it). zellij knows neither when a pane last changed
        nor whether anyone looked at it: its captures carry no activity and no seen fact, so its agents are
        `idle`, never `done`, and a working screen is never judged stale. The pane's `terminal_command`, what
        mam started, tells the kind of an agent whose row has none."""
        dumps: dict[str, tuple[str, str | None]] = {}
        for agent in agents:
            if agent.name is None or agent.pane_id is None or not agent.pane_id.isdigit():
                continue
            result = self._run(["--session", server, "action", "dump-screen", "--pane-id",
                                f"terminal_{agent.pane_id}"], timeout=ctx.timeout, env=ctx.env)
            if result.over_limit:  # a dump of its own: only this pane is left unread
                dumps[agent.name] = (agent.pane_id, None)
                continue
            text = result.stdout + result.stderr
            if any(marker in text for marker in _NOT_FOUND) or NO_SESSIONS in text:
                return Failure(self.name, server, result)  # the session went away: the whole answer is void
            if result.returncode != 0 or result.stderr.strip():
                continue
            dumps[agent.name] = (agent.pane_id, result.stdout)
        if not dumps:
            return {}
        panes = self._list_panes(server, ctx, pane_list)
        if isinstance(panes, Failure):
            return panes
        out: dict[str, PaneCapture] = {}
        for name, (pane_id, screen) in dumps.items():
            pane = pane_by_id(panes, pane_id)
            if pane is None or pane.get("is_plugin"):
                continue
            command = pane.get("terminal_command")
            command = command if isinstance(command, str) and command.strip() else None
            unread = TOO_MUCH if screen is None else None
            if pane.get("exited"):
                status = pane.get("exit_status")
                out[name] = PaneCapture(text=screen, dead=True, command=command, unread=unread,
                                        dead_status=f"exit status {status}" if isinstance(status, int) else None)
            elif running(pane):
                out[name] = PaneCapture(text=screen, command=command, unread=unread)
        return out

    def agent_remains(self, server: str, names: tuple[str, ...],
                      ctx: CallContext) -> dict[str, Remains] | Failure:
        """The ended agents of `names` whose command pane zellij holds (`exited`, with its `exit_status`): the
        status and the last lines of its screen (`dump-screen`). Reads only; a session that is gone keeps
        nothing to read."""
        panes = self._list_panes(server, ctx, pane_list)
        if isinstance(panes, Failure):
            return {}  # down or gone: nothing is kept there
        remains: dict[str, Remains] = {}
        for name in names:
            ended = [p for p in held(panes, name) if p.get("exited") and isinstance(p.get("id"), int)]
            if not ended:
                continue
            pane = ended[-1]
            result = self._run(["--session", server, "action", "dump-screen", "--pane-id", f"terminal_{pane['id']}"],
                               timeout=ctx.timeout, env=ctx.env)
            ok = result.returncode == 0 and not result.stderr.strip()
            lines = [line for line in result.stdout.splitlines() if line.strip()] if ok else []
            status = pane.get("exit_status")
            known = isinstance(status, int) and not isinstance(status, bool) and status >= 0
            remains[name] = Remains(status if known else None, None, tuple(lines[-20:]))
        return remains

    def send_text(self, server: str, agent: Agent, text: str, enter: bool, ctx: CallContext) -> SendResult:
        """`write-chars` types `text` as characters (no key names), `paste` a text of several lines; Enter is
        byte 13 by `write`. zellij types
        into a pane that is gone without a word, and Enter or a space in a held pane runs its command again: the
        pane is checked before each write, and after the last."""
        if agent.pane_id is None or not agent.pane_id.isdigit():
            return SendResult(False, f"zellij gave no pane id for {agent.name}")
        pane = f"terminal_{agent.pane_id}"
        # Several lines are one paste (`action paste`, zellij 0.44+): zellij brackets it when the program asked
        # for bracketed paste, so that its lines do not each submit.
        verb = "paste" if "\n" in text else "write-chars"
        calls = ([[verb, "--pane-id", pane, "--", text]] if text else []) + (
            [["write", "--pane-id", pane, "13"]] if enter else [])
        for i, call in enumerate([*calls, None]):
            now = self._pane_now(server, agent.pane_id, ctx)
            if isinstance(now, Failure):
                return SendResult(False, "zellij could not be asked whether the pane is there", failure=now)
            if now is None or not running(now):
                why = "is gone" if now is None else "has exited" if now.get("exited") else "is suspended"
                sent = "; nothing was sent" if i == 0 else "; part of the text may have been typed into it"
                if call is None:
                    sent = "; the text may not have arrived"
                return SendResult(False, f"{agent.name}'s zellij pane {pane} {why}{sent}")
            if call is None:
                break
            result = self._run(["--session", server, "action", *call], timeout=ctx.timeout, env=ctx.env)
            if result.returncode != 0 or (result.stdout + result.stderr).strip():  # success is silent
                return SendResult(False, f"zellij {call[0]} failed", failure=Failure(self.name, server, result))
        return SendResult(True, sent_message("sent", text, agent.name, enter))
