"""Looking at one agent: the last lines of its screen (`mam peek`), and the client command that puts the user in
front of its pane (`mam attach`). Plain functions, for the commands and for the `mam top` view alike.

Neither starts a server: the agent is found by listing its server, and a server that is down is an error.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mam.agents.rows import agent_row, listed_agent
from mam.calls.route import remote_route
from mam.plugin.records import Agent, Failure, PaneCapture
from mam.servers.fanout import call_context, outcomes_for
from mam.util.errors import MamError

if TYPE_CHECKING:
    from mam.registry import Row
    from mam.servers.app import App

# Deferred imports (inside functions), for start-up: peek and attach each load what their own path needs, for `mam
# top` too.

DEFAULT_LINES = 20
MAX_LINES = 10_000  # a screen, not a log: anything longer is bad input
ATTACH_ECHO = "MAM_ATTACH_ECHO"  # set to 1: `mam attach` prints the command it would run instead of running it


def live_agent(app: App, row: Row, verb: str) -> Agent:
    """The listed agent of `row`; an error when its server is down (never started here), could not be asked,
    or does not list it. `verb` names the command in the messages (`mam peek`)."""

    key = row.server_key
    return listed_agent(app, row, outcomes_for(app, {key})[key], verb)


def check_lines(lines: int) -> None:
    if not 1 <= lines <= MAX_LINES:
        raise MamError("usage", f"--lines {lines}: expected a number of lines from 1 to {MAX_LINES}")


def peek_document(app: App, name: str, lines: int = DEFAULT_LINES, server: str | None = None,
                  host: str | None = None) -> dict[str, Any]:
    """The last `lines` lines of agent `name`'s screen, escape sequences removed and every other control or
    invisible character written out (mam.util.render.visible): text that is safe to print (docs/json.md, peek)."""
    from mam.kinds.classify import screen_lines
    from mam.util.render import visible

    check_lines(lines)
    row = agent_row(app, name, server, host)
    backend = app.plugins.backend(row.backend)
    agent = live_agent(app, row, "mam peek")
    with _route(app, row):
        raw = _screen(app, backend, row, agent, lines, call_context(app))
    shown = [visible(line) for line in screen_lines(raw)][-lines:]
    return {"schema": 1, "name": row.name, "backend": row.backend, "server": row.server, "host": row.host,
            "pane_id": agent.pane_id, "lines": shown}


def _route(app: App, row: Row) -> Any:
    return remote_route(app.route(row.host))


def _screen(app: App, backend: Any, row: Row, agent: Agent, lines: int, ctx: Any) -> str:
    """The agent's screen as its backend reads it: its own `read_pane` (herdr reads recent output), else the
    pane capture the state rules read (tmux, zellij: the visible screen)."""
    reader = getattr(backend, "read_pane", None)
    if reader is not None:
        answer: str | Failure = reader(row.server, agent, lines, ctx)
        if isinstance(answer, Failure):
            raise _failed(app, backend, row, answer)
        return answer
    captured = app.plugins.capture_panes(backend, row.server, (agent,), ctx)
    if captured is None:
        raise MamError("operation_failed", f"backend {row.backend} cannot show an agent's screen")
    if isinstance(captured, Failure):
        raise _failed(app, backend, row, captured)
    capture: PaneCapture | None = captured.get(row.name)
    if capture is not None and capture.text is None and capture.unread:
        from mam.kinds.classify import clean

        raise MamError("operation_failed", f"{row.name}'s screen was not read: {clean(capture.unread)[:200]}",
                       hint="see `mam status`")
    if capture is None or capture.text is None:
        raise MamError("operation_failed", f"{row.name}'s pane on {row.backend} server {row.server} could not be "
                       "read (it may have closed meanwhile)", hint="see `mam status`")
    return capture.text


def _failed(app: App, backend: Any, row: Row, failure: Failure) -> MamError:
    error = app.plugins.classify(backend, failure)
    return MamError("operation_failed", f"could not read {row.name}'s screen on {row.backend} server "
                    f"{row.server}: {error.message}")


@dataclass(frozen=True)
class AttachCommand:
    """What `mam attach` replaces itself with: the program's path, its argv and its environment."""

    program: str
    argv: list[str]
    env: dict[str, str]
    name: str
    backend: str
    server: str
    host: str | None

    def as_json(self) -> dict[str, Any]:
        return {"schema": 1, "name": self.name, "backend": self.backend, "server": self.server, "host": self.host,
                "argv": self.argv}


def attach_command(app: App, name: str, server: str | None = None, host: str | None = None,
                   tty: str | None = None) -> AttachCommand:
    """The client command that shows agent `name`'s pane: the backend's own attach (tmux switches the client
    it runs in when that is already on the agent's server), through `ssh -t` for an agent on another host.
    `tty` is the caller's terminal (for tmux's switch-client)."""
    from mam.calls.shims import path_without_shims

    row = agent_row(app, name, server, host)
    backend = app.plugins.backend(row.backend)
    argv_of = getattr(backend, "attach_argv", None)
    if argv_of is None:
        raise MamError("operation_failed", f"backend {row.backend} has no client to attach with")
    agent = live_agent(app, row, "mam attach")
    # The backend reads the caller's own markers ($TMUX) to tell whether it runs inside the agent's server;
    # the client itself gets the scrubbed environment, as `mam exec` does. Over ssh, the caller's markers say
    # nothing of the remote host.
    outer: Mapping[str, str] = {} if row.host else app.env
    argv: list[str] = list(argv_of(row.server, agent, outer, None if row.host else tty))
    env = dict(app.server_env)
    env["PATH"] = path_without_shims(env.get("PATH", ""))
    for variable in ("TERM", "COLORTERM", "LANG"):  # the client draws on the caller's terminal
        if variable in app.env and variable not in env:
            env[variable] = app.env[variable]
    route = app.route(row.host)
    if route is not None:
        argv = route.client_argv(argv)
        env = route.ssh_env(env)
    program = shutil.which(argv[0], path=env.get("PATH", ""))
    if program is None:
        raise MamError("backend_unavailable", f"{argv[0]}: not found on PATH")
    return AttachCommand(program, argv, env, row.name, row.backend, row.server, row.host)


def exec_attach(command: AttachCommand) -> None:
    """Replace this process with the attach client (never returns), unless $MAM_ATTACH_ECHO is 1: then the
    argv it would run is printed, one JSON line, for scripts and tests that have no terminal to give it."""
    import json
    import sys

    if os.environ.get(ATTACH_ECHO) == "1":
        sys.stdout.write(json.dumps(command.as_json()) + "\n")
        sys.stdout.flush()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command.program, command.argv, command.env)
