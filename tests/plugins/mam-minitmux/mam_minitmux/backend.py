"""minitmux: a server is a tmux socket name (`tmux -L SERVER`), an agent a tmux session of one pane."""

from __future__ import annotations

from collections.abc import Mapping

from mam.api import (
    Agent,
    BootstrapContext,
    BootstrapResult,
    CallContext,
    ErrorKind,
    Failure,
    PaneCapture,
    SendResult,
    ServerError,
    SpawnRequest,
    SpawnResult,
    StopResult,
    find_for_stop,
    first_line,
    open_text_log,
    parse_or_failure,
    poll_until,
    run,
    sent_message,
)

KEEPALIVE = "_keepalive"  # the session bootstrap starts to keep the server up: never listed as an agent
# The last field is "mam" in a session mam made (spawn sets its @mam): stop leaves any other one alone.
FIELDS = ("#{session_name}", "#{pane_id}", "#{pane_current_path}", "#{?@mam,mam,}")


def tmux(server: str, *args: str) -> list[str]:
    """A call to one server that never starts it (-N): queries, spawn, stop and send alike."""
    return ["tmux", "-N", "-L", server, *args]


def literal(arg: str) -> str:
    """tmux reads an argument ending in ';' as a command separator, unless a backslash comes before it."""
    return arg[:-1] + "\\;" if arg.endswith(";") else arg


def parse_panes(stdout: str) -> tuple[Agent, ...]:
    agents: dict[str, Agent] = {}
    for line in stdout.splitlines():
        fields = line.split("\x1f")
        if len(fields) != len(FIELDS):
            raise ValueError(f"a pane line of {len(fields)} fields")
        name, pane_id, cwd, mark = fields
        if name != KEEPALIVE:
            # tmux shows no cwd for a pane whose program has only just started: not known, never ""
            agents.setdefault(name, Agent(name=name, cwd=cwd or None, pane_id=pane_id,  # a session's first pane
                                          foreign=mark != "mam"))
    return tuple(agents.values())


class MiniTmuxBackend:
    name = "minitmux"

    def list_agents(self, server: str, ctx: CallContext) -> tuple[Agent, ...] | Failure:
        result = run(tmux(server, "list-panes", "-a", "-F", "\x1f".join(FIELDS)), timeout=ctx.timeout, env=ctx.env)
        return parse_or_failure(self.name, server, result, parse_panes)

    def classify(self, failure: Failure) -> ServerError | None:
        """Down only on tmux's own words for a socket nobody listens on; anything else is not ours to guess."""
        line = first_line(failure.result.stderr)
        if failure.result.returncode == 1 and (line.startswith("no server running on ") or (
                line.startswith("error connecting to ") and line.endswith("(No such file or directory)"))):
            return ServerError(ErrorKind.SERVER_DOWN, line)
        return None

    def version(self, ctx: CallContext) -> str | None:
        result = run(["tmux", "-V"], timeout=ctx.timeout, env=ctx.env)
        if result.returncode != 0:
            return None
        return first_line(result.stdout) or None

    def bootstrap(self, server: str, ctx: BootstrapContext) -> BootstrapResult:
        call = CallContext(timeout=ctx.timeout, env=ctx.env)
        listed = self.list_agents(server, call)
        if not isinstance(listed, Failure):
            return BootstrapResult(started=False, up=True, message=f"tmux server {server} already runs")
        error = self.classify(listed)
        if error is None or error.kind is not ErrorKind.SERVER_DOWN:
            return BootstrapResult(False, False, "could not tell whether the server runs", failure=listed)
        started = run(["tmux", "-L", server, "new-session", "-d", "-s", KEEPALIVE], timeout=ctx.timeout,
                      env=ctx.env, cwd=str(ctx.cwd))
        with open_text_log(ctx.log_path) as log:
            log.write(started.stdout + started.stderr)
        if started.returncode != 0:
            return BootstrapResult(False, False, "tmux new-session failed", failure=Failure(self.name, server, started))
        up = poll_until(lambda: None if isinstance(self.list_agents(server, call), Failure) else True, wait=ctx.wait)
        return BootstrapResult(started=True, up=bool(up), message=f"started tmux server {server}")

    def spawn(self, server: str, request: SpawnRequest, ctx: CallContext) -> SpawnResult:
        if not request.argv:
            return SpawnResult(False, "no program to run")
        variables = [part for name, value in request.env for part in ("-e", literal(f"{name}={value}"))]
        # tmux runs a command of one argument with `sh -c`: starting it with `env --` runs the argv as given.
        argv = ["env", "--", *request.argv]
        result = run(tmux(server, "new-session", "-d", "-s", literal(request.name.replace("#", "##")),
                          "-c", literal(request.cwd.replace("#", "##")), *variables, "-P", "-F", "#{pane_id}",
                          "--", *(literal(arg) for arg in argv), ";", "set-option", "@mam", "1"),
                     timeout=ctx.timeout, env=ctx.env)
        if result.returncode != 0:
            return SpawnResult(False, "tmux refused the new session", failure=Failure(self.name, server, result))
        pane_id = result.stdout.strip()
        return SpawnResult(True, f"started {request.name} in tmux pane {pane_id}", pane_id=pane_id)

    def stop(self, server: str, name: str, ctx: CallContext, force: bool = False) -> StopResult:
        # The live agent, or what to answer when there is none, or when mam did not make it and force is not given
        agent = find_for_stop(self, server, name, ctx, force)
        if isinstance(agent, StopResult):
            return agent
        assert agent.pane_id is not None
        result = run(tmux(server, "kill-pane", "-t", agent.pane_id), timeout=ctx.timeout, env=ctx.env)
        if result.returncode != 0:
            return StopResult(False, "tmux kill-pane failed", failure=Failure(self.name, server, result))
        return StopResult(True, f"closed tmux pane {agent.pane_id}")

    def client_argv(self, server: str, args: list[str]) -> list[str]:
        return ["tmux", "-L", server, *args]

    def send_text(self, server: str, agent: Agent, text: str, enter: bool, ctx: CallContext) -> SendResult:
        """The text as characters (-l: never key names), then Enter as a key of its own."""
        if not agent.pane_id:
            return SendResult(False, f"tmux gave no pane id for {agent.name}")
        calls = ([["send-keys", "-l", "-t", agent.pane_id, "--", literal(text)]] if text else []) + (
            [["send-keys", "-t", agent.pane_id, "Enter"]] if enter else [])
        for call in calls:
            result = run(tmux(server, *call), timeout=ctx.timeout, env=ctx.env)
            if result.returncode != 0:
                return SendResult(False, "tmux send-keys failed", failure=Failure(self.name, server, result))
        return SendResult(True, sent_message("sent", text, agent.name, enter))

    def capture_panes(self, server: str, agents: tuple[Agent, ...],
                      ctx: CallContext) -> Mapping[str, PaneCapture] | Failure:
        """Each agent's visible screen, one call per pane; a pane that is gone is left out (its state: unknown)."""
        screens: dict[str, PaneCapture] = {}
        for agent in agents:
            if agent.name is None or agent.pane_id is None:
                continue
            result = run(tmux(server, "capture-pane", "-p", "-J", "-t", agent.pane_id), timeout=ctx.timeout,
                         env=ctx.env)
            if result.returncode == 0:
                screens[agent.name] = PaneCapture(text=result.stdout)
            elif (error := self.classify(Failure(self.name, server, result))) and error.kind is ErrorKind.SERVER_DOWN:
                return Failure(self.name, server, result)
        return screens
