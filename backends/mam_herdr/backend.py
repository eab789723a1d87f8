"""Driving herdr's CLI (0.8.x, protocol 20). Every call names its session with `--session NAME`, first."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from typing import Any

from mam.api import (
    SESSION_ID_PATTERN,
    Agent,
    BootstrapContext,
    BootstrapResult,
    CallContext,
    CommandResult,
    ErrorKind,
    Failure,
    SendResult,
    ServerError,
    SpawnRequest,
    SpawnResult,
    StopResult,
    find_for_stop,
    open_log,
    parse_or_failure,
    poll_until,
    run,
    sent_message,
)

EXECUTABLE = "herdr"
# `agent start --kind` accepts these kinds. herdr types each kind's own program
# into the pane's shell itself, with the arguments after `--` quoted one by one: it cannot run any other program.
PROGRAMS = {
    "pi": "pi", "claude": "claude", "claude-code": "claude", "codex": "codex", "gemini": "gemini",
    "cursor": "cursor-agent", "devin": "devin", "agy": "agy", "antigravity": "agy", "cline": "cline", "omp": "omp",
    "mastracode": "mastracode", "opencode": "opencode", "copilot": "copilot", "kimi": "kimi", "kiro": "kiro-cli",
    "droid": "droid", "amp": "amp", "grok": "grok", "hermes": "hermes", "kilo": "kilo", "qodercli": "qodercli",
    "qwen": "qwen", "maki": "maki",
}
POLL_INTERVAL = 0.05


START_TIMEOUT_VAR = "MAM_HERDR_START_TIMEOUT"  # checked by mam at every command: more than 3, at most 300
DEFAULT_START_TIMEOUT = 30.0  # herdr's own default for `agent start --timeout`


def start_timeout(env: Mapping[str, str]) -> float:
    try:
        value = float(env.get(START_TIMEOUT_VAR) or DEFAULT_START_TIMEOUT)
    except ValueError:
        return DEFAULT_START_TIMEOUT
    return value if 3 < value <= 300 else DEFAULT_START_TIMEOUT


# What herdr's `agent start` codes mean for the agent (src/cli/agent.rs, src/app/agents.rs).
START_REFUSED = {
    "agent_name_taken": "herdr already has an agent of that name",
    "agent_pane_not_found": "herdr lost the pane it made for it",
    "agent_pane_busy": "the pane herdr made for it was not an idle shell",
    "agent_start_failed": "its program exited before it became interactive",
    "agent_kind_mismatch": "herdr found another kind of agent in its pane (left running there, unnamed)",
    "invalid_agent_name": "herdr refused the name",
    "invalid_agent_argument": "herdr cannot type its arguments safely",
    "unsupported_agent_kind": "herdr does not know the kind",
    "invalid_agent_timeout": f"herdr refused the start timeout (${START_TIMEOUT_VAR})",
}


# Refusals after which the pane mam made holds only its shell (a kind mismatch leaves a program running there).
LEAVES_A_SHELL = frozenset({"agent_name_taken", "agent_start_failed", "invalid_agent_name", "invalid_agent_argument",
                            "unsupported_agent_kind", "invalid_agent_timeout"})


def start_failure(name: str, pane_id: str, wait: float, failure: Failure) -> SpawnResult:
    """An `agent start` that did not answer agent_started. `agent_not_ready` is a start: the agent runs and waits
    at a start-up dialog (it is listed `blocked`). `timeout` may still finish: unsettled. A code that says it did
    not start is a refusal; anything else is left to may_have_started (a timeout of mam's own, a crash)."""
    error = structured_error(failure.result.stderr) if failure.result.returncode == 1 else None
    code = error["code"] if error else None
    if code == "agent_not_ready":
        return SpawnResult(True, f"started {name} in herdr pane {pane_id}; it waits at a start-up dialog "
                                 "(herdr agent_not_ready)", pane_id=pane_id)
    if code == "timeout":
        return SpawnResult(False, f"herdr did not see {name} ready within {wait:g} s (${START_TIMEOUT_VAR})",
                           failure=failure, unsettled=True)
    if code in START_REFUSED:
        return SpawnResult(False, f"herdr agent start failed in pane {pane_id}: {START_REFUSED[code]}",
                           failure=failure)
    return SpawnResult(False, "herdr agent start failed", failure=failure)


def _argv(server: str, *args: str) -> list[str]:
    # An explicit --session beats $HERDR_SOCKET_PATH and $HERDR_SESSION; it always comes first.
    return [EXECUTABLE, "--session", server, *args]


def _opt_str(entry: dict[str, Any], key: str) -> str | None:
    value = entry.get(key)
    return value if isinstance(value, str) else None


def parse_agent_list(stdout: str) -> tuple[Agent, ...]:
    """Parse `agent list`'s one-line envelope. Raises ValueError on anything else. Names are data."""
    envelope = json.loads(stdout)
    if not isinstance(envelope, dict) or not isinstance(envelope.get("result"), dict):
        raise ValueError("no `result` object in the answer")
    result = envelope["result"]
    if result.get("type") != "agent_list" or not isinstance(result.get("agents"), list):
        raise ValueError(f"expected an agent_list result, got type {result.get('type')!r}")
    agents = []
    for entry in result["agents"]:
        if not isinstance(entry, dict):
            raise ValueError("an agent entry is not an object")
        agents.append(Agent(name=_opt_str(entry, "name"), agent=_opt_str(entry, "agent"),
                            state=_opt_str(entry, "agent_status"), cwd=_opt_str(entry, "cwd"),
                            pane_id=_opt_str(entry, "pane_id"),
                            session=_session_id(entry.get("agent_session"), _opt_str(entry, "agent"))))
    return tuple(agents)


def _session_id(reported: object, kind: str | None) -> str | None:
    """The id of `agent_session` ({"agent", "kind", "source", "value"}) when its kind is `id`, it was reported
    for the agent kind the pane runs (a pane that now runs another agent reports that one's), and it looks
    like an id: anything in the pane may report a session, so a value an agent could read as an option or a
    path (a leading '-', a '/', '..') is never taken. A `path` session (a file) is not resumable by id."""
    if not isinstance(reported, dict) or reported.get("kind") != "id" or kind is None:
        return None
    value = reported.get("value")
    if reported.get("agent") != kind or not isinstance(value, str):
        return None
    return value if SESSION_ID_PATTERN.fullmatch(value) and ".." not in value else None


# herdr's socket protocol of each release line (a client and a server of different protocols cannot talk).
PROTOCOLS = {17: "0.7.5", 19: "0.8.0", 20: "0.8.2", 22: "0.9"}
SUPPORTED = ((0, 8),)  # the release lines mam is tested against: 0.8.x (0.8.0 brought `server_not_running`)


def is_supported(version: str) -> bool:
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", version)
    return found is not None and (int(found[1]), int(found[2])) in SUPPORTED


def mismatch_hint(message: object) -> str:
    """herdr's protocol_mismatch, said with the releases: `client protocol 22 is newer than server protocol 20`
    is a herdr 0.9 client and a 0.8.2 server. The server is there: never `down`."""
    found = re.search(r"client protocol (\d+) is \w+ than server protocol (\d+)",
                      message if isinstance(message, str) else "")
    if found is None:
        return "herdr's client and server speak different protocols: restart the server with this herdr, or use " \
               "the herdr that started it"
    client, server = int(found[1]), int(found[2])

    def release(protocol: int) -> str:
        return f"herdr {PROTOCOLS[protocol]}" if protocol in PROTOCOLS else "another herdr"

    return (f"the herdr on PATH is {release(client)} (protocol {client}) and the server runs {release(server)} "
            f"(protocol {server}): restart the server with this herdr (its agents stop), or put the herdr that "
            "started it first on PATH")


def structured_error(stderr: str) -> dict[str, Any] | None:
    """herdr's error envelope, when stderr is exactly one JSON object with an `error.code` string."""
    text = stderr.strip()
    if not text or "\n" in text:
        return None
    try:
        envelope = json.loads(text)
    except ValueError:
        return None
    if not isinstance(envelope, dict):
        return None
    error = envelope.get("error")
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        return None
    return error


def parse_session_list(stdout: str) -> dict[str, bool]:
    """`session list --json`: session name -> running."""
    document = json.loads(stdout)
    sessions = document.get("sessions") if isinstance(document, dict) else None
    if not isinstance(sessions, list):
        raise ValueError("no `sessions` list in the answer")
    running: dict[str, bool] = {}
    for entry in sessions:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValueError("a session entry has no name")
        running[entry["name"]] = entry.get("running") is True
    return running


class HerdrBackend:
    name = "herdr"
    pastes_lines = True  # send_text takes a text of several lines and sends it as one paste

    def list_agents(self, server: str, ctx: CallContext) -> tuple[Agent, ...] | Failure:
        result = run(_argv(server, "agent", "list"), timeout=ctx.timeout, env=ctx.env)
        return parse_or_failure(self.name, server, result, parse_agent_list)

    def classify(self, failure: Failure) -> ServerError | None:
        result = failure.result
        if result.returncode in (None, 0):
            return None
        error = structured_error(result.stderr)
        if error is None:
            return None  # plain text, an empty stderr, a raw Rust error: not herdr's signal, so not "down"
        code, message = error["code"], error.get("message")
        detail = f"herdr {code}" + (f": {message}" if isinstance(message, str) and message else "")
        if code == "server_not_running" and result.returncode == 1 and not result.stdout.strip():
            return ServerError(ErrorKind.SERVER_DOWN, detail)
        if code == "protocol_mismatch":
            return ServerError(ErrorKind.PROTOCOL_MISMATCH, detail + f" ({mismatch_hint(message)})")
        return ServerError(ErrorKind.UNKNOWN, detail)

    def supported(self, version: str) -> bool:
        """Whether `herdr --version`'s line names a release mam is tested against (docs/backends.md)."""
        return is_supported(version)

    def version(self, ctx: CallContext) -> str | None:
        result = run([EXECUTABLE, "--version"], timeout=ctx.timeout, env=ctx.env)
        if result.returncode != 0:
            return None
        return result.stdout.strip().splitlines()[0] if result.stdout.strip() else None

    def _running(self, server: str, ctx: BootstrapContext) -> bool | Failure:
        # `session list --json` never contacts a server, so probing cannot start or disturb one.
        result = run([EXECUTABLE, "session", "list", "--json"], timeout=ctx.timeout, env=ctx.env,
                            cwd=str(ctx.cwd))
        return parse_or_failure(self.name, server, result,
                                       lambda stdout: parse_session_list(stdout).get(server, False))

    def bootstrap(self, server: str, ctx: BootstrapContext) -> BootstrapResult:
        running = self._running(server, ctx)
        if isinstance(running, Failure):
            return BootstrapResult(False, False, "could not tell whether the server runs", failure=running)
        if running:
            return BootstrapResult(False, True, f"herdr session {server} is already running")
        ctx.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = _argv(server, "server")
        with open_log(ctx.log_path) as log:
            try:
                # herdr's server stays in the foreground: detach it as herdr's own TUI does.
                proc = subprocess.Popen(  # noqa: S603 - explicit argv, no shell
                    argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=dict(ctx.env), cwd=ctx.cwd,
                    start_new_session=True, close_fds=True)
            except OSError as exc:
                result = CommandResult(tuple(argv), None, not_found=isinstance(exc, FileNotFoundError),
                                       os_error=None if isinstance(exc, FileNotFoundError) else str(exc))
                return BootstrapResult(False, False, "herdr could not be started",
                                       failure=Failure(self.name, server, result))
        def settled() -> BootstrapResult | None:
            if self._running(server, ctx) is True:
                return BootstrapResult(True, True, f"started herdr session {server}", pid=proc.pid)
            code = proc.poll()
            if code is not None and self._running(server, ctx) is not True:
                return BootstrapResult(True, False, f"herdr server exited with code {code}; see {ctx.log_path}",
                                       pid=proc.pid)
            return None

        outcome = poll_until(settled, wait=ctx.wait, interval=POLL_INTERVAL)
        if outcome is not None:
            return outcome
        proc.terminate()  # do not leave a half-started server behind
        return BootstrapResult(True, False, f"herdr session {server} did not report running within "
                               f"{ctx.wait:g} s; see {ctx.log_path}", pid=proc.pid)



    def _call(self, server: str, args: list[str], ctx: CallContext, result_type: str) -> dict[str, Any] | Failure:
        result = run(_argv(server, *args), timeout=ctx.timeout, env=ctx.env)

        def parse(stdout: str) -> dict[str, Any]:
            envelope = json.loads(stdout)
            answer = envelope.get("result") if isinstance(envelope, dict) else None
            if not isinstance(answer, dict) or answer.get("type") != result_type:
                raise ValueError(f"expected a {result_type} result")
            return answer

        return parse_or_failure(self.name, server, result, parse)

    def client_argv(self, server: str, args: list[str]) -> list[str]:
        return _argv(server, *args)

    def attach_argv(self, server: str, agent: Agent, outer: Mapping[str, str], tty: str | None) -> list[str]:
        # `session attach NAME` names its session itself, as its first words only (never after --session).
        return [EXECUTABLE, "session", "attach", server]

    def read_pane(self, server: str, agent: Agent, lines: int, ctx: CallContext) -> str | Failure:
        """`agent read TARGET --source visible --lines N`: the last N lines of the agent's screen, raw text. Never
        `--source recent`: herdr reads that as the last N rows of the screen, blank ones included, so an agent that
        has drawn only the top of its screen (a fresh pane) reads as nothing (src/server/alt_screen_read.rs)."""
        target = agent.pane_id or agent.name or ""
        if not target or target.startswith("-") or taken_by_herdr(target):  # never read as an option
            return Failure(self.name, server, CommandResult((EXECUTABLE,), None, os_error="herdr gave no pane id"))
        result = run(_argv(server, "agent", "read", target, "--source", "visible", "--lines", str(lines)),
                     timeout=ctx.timeout, env=ctx.env)
        return result.stdout if result.returncode == 0 else Failure(self.name, server, result)

    def spawn(self, server: str, request: SpawnRequest, ctx: CallContext) -> SpawnResult:
        kind = request.agent or ""
        program = PROGRAMS.get(kind)
        if program is None:
            return SpawnResult(False, f"herdr starts only the agent kinds it knows, not {request.agent!r} "
                                      "(--command is for tmux and zellij)")
        if request.argv[:1] != (program,):
            # Handing herdr only argv[1:] would run `program` instead of what was asked: refuse.
            first = request.argv[0] if request.argv else ""
            shown = first if len(first) <= 60 else first[:60] + "..."
            return SpawnResult(False, f"herdr runs {kind}'s own program {program!r}, not {shown!r} "
                                      "(--command is for tmux and zellij)")
        # The agent's own variables go in the new pane's environment (`--env K=V` adds or overrides), which
        # the shell herdr types the program into passes on.
        variables = [part for name, value in request.env for part in ("--env", f"{name}={value}")]
        created = self._call(server, ["workspace", "create", "--cwd", request.cwd, "--label", request.name,
                                      *variables, "--no-focus"], ctx, "workspace_created")
        if isinstance(created, Failure):
            return SpawnResult(False, "herdr workspace create failed", failure=created)
        pane = created.get("root_pane")
        pane_id = pane.get("pane_id") if isinstance(pane, dict) else None
        if not isinstance(pane_id, str):
            return SpawnResult(False, "herdr workspace create gave no root pane")
        # `agent start` blocks until herdr sees the agent ready (at least 3 s, at most --timeout): its own limit,
        # and mam's on the call beyond it, so that herdr gives its answer before mam stops waiting.
        wait = start_timeout(ctx.env)
        started = self._call(server, ["agent", "start", request.name, "--kind", kind, "--pane", pane_id,
                                      "--timeout", str(round(wait * 1000)), "--", *request.argv[1:]],
                             CallContext(timeout=wait + ctx.timeout, env=ctx.env), "agent_started")
        if isinstance(started, Failure):
            outcome = start_failure(request.name, pane_id, wait, started)
            error = structured_error(started.result.stderr) or {}
            if error.get("code") in LEAVES_A_SHELL:  # nothing of the agent runs there: do not leave the pane
                run(_argv(server, "pane", "close", pane_id), timeout=ctx.timeout, env=ctx.env)
            return outcome
        return SpawnResult(True, f"started {request.name} in herdr pane {pane_id}", pane_id=pane_id)

    def stop(self, server: str, name: str, ctx: CallContext, force: bool = False) -> StopResult:
        """Close the pane of the agent herdr knows as `name`. herdr names an agent only when `agent start NAME`
        started it (or someone renamed it): a pane where anyone runs an agent by hand has no name, so no row
        reaches it."""
        agent = find_for_stop(self, server, name, ctx, force)
        if isinstance(agent, StopResult):
            return agent
        assert agent.pane_id is not None
        closed = self._call(server, ["pane", "close", agent.pane_id], ctx, "ok")
        if isinstance(closed, Failure):
            return StopResult(False, f"herdr pane close {agent.pane_id} failed", failure=closed)
        return StopResult(True, f"closed herdr pane {agent.pane_id}")

    def send_text(self, server: str, agent: Agent, text: str, enter: bool, ctx: CallContext) -> SendResult:
        """`pane send-text PANE TEXT` types exactly TEXT, then `pane send-keys ... Enter`; both print nothing on
        success. Never `-- TEXT`: herdr keeps a `--` there and types it. herdr's own state comes with every
        listing (`agent_status`), so it needs no capture."""
        if agent.pane_id is None:
            return SendResult(False, f"herdr gave no pane id for {agent.name}")
        if "\n" in text:
            return self._prompt(server, agent, text, enter, ctx)
        calls = [["pane", "send-text", agent.pane_id, piece] for piece in text_pieces(text)] + (
            [["pane", "send-keys", agent.pane_id, "Enter"]] if enter else [])
        for call in calls:
            result = run(_argv(server, *call), timeout=ctx.timeout, env=ctx.env)
            if result.returncode != 0 or result.stdout.strip() or result.stderr.strip():
                return SendResult(False, f"herdr pane {call[1]} failed", failure=Failure(self.name, server, result))
        return SendResult(True, sent_message("sent", text, agent.name, enter))


    def _prompt(self, server: str, agent: Agent, text: str, enter: bool, ctx: CallContext) -> SendResult:
        """Several lines: `pane send-text` writes the bytes as they are (src/app/api/panes.rs), never as a paste,
        so each line would submit on its own. Only `agent prompt` pastes (bracketed when the program asked), and
        it always submits (src/app/api/agents.rs): several lines go to herdr only with Enter."""
        assert agent.pane_id is not None
        if not enter:
            return SendResult(False, "herdr pastes several lines only as a prompt it submits at once (`herdr agent "
                              f"prompt`): add --enter; nothing was sent to {agent.name}")
        if taken_by_herdr(text):
            return SendResult(False, f"herdr would read a text that starts with {text.split('=')[0]} as its own "
                              f"option; nothing was sent to {agent.name}")
        prompted = self._call(server, ["agent", "prompt", agent.pane_id, text], ctx, "agent_prompted")
        if isinstance(prompted, Failure):
            return SendResult(False, "herdr agent prompt failed; nothing was pasted", failure=prompted)
        return SendResult(True, sent_message("pasted", text, agent.name, True) + " (herdr agent prompt)")


# herdr takes these words for its own options wherever they stand before a `--` (src/session.rs, `--session`;
# src/remote/attach.rs, the remote flags; 0.9 adds `--machine`), also where they are the text of `pane send-text`.
GLOBAL_OPTIONS = ("--session", "--remote", "--remote-keybindings", "--handoff", "--machine")


def taken_by_herdr(word: str) -> bool:
    return any(word == flag or word.startswith(flag + "=") for flag in GLOBAL_OPTIONS)


def text_pieces(text: str) -> list[str]:
    """The text as the words `pane send-text` is given, one call each: herdr types each as it is (a text that is
    exactly `--` included). A text herdr would take for its own option (`--session=x`) goes as `-` and then the
    rest (`-session=x`), which no option of herdr's matches: the pane gets the same characters, in order."""
    if not text:
        return []
    if taken_by_herdr(text):
        return [text[0], text[1:]]
    return [text]
