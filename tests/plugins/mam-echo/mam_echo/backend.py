"""The echo backend: $ECHO_AGENTS is a JSON object, server -> agent names; a server not in it is down."""

from __future__ import annotations

import json

from mam.api import (
    Agent,
    BootstrapContext,
    BootstrapResult,
    CallContext,
    CommandResult,
    ErrorKind,
    Failure,
    ServerError,
)

DOWN = "echo: no such server"


class EchoBackend:
    name = "echo"

    def list_agents(self, server: str, ctx: CallContext) -> tuple[Agent, ...] | Failure:
        if "ECHO_PANE" in ctx.env:  # its own marker must be scrubbed from its own calls: say so if it is not
            return Failure(self.name, server, CommandResult(("echo", server), 1, "", "echo: ECHO_PANE leaked"))
        table = json.loads(ctx.env.get("ECHO_AGENTS", "{}"))
        if server in table:
            return tuple(Agent(name=n, agent="echo") for n in table[server])
        return Failure(self.name, server, CommandResult(("echo", server), 1, "", DOWN))

    def classify(self, failure: Failure) -> ServerError | None:
        if failure.result.returncode == 1 and failure.result.stderr.strip() == DOWN:
            return ServerError(ErrorKind.SERVER_DOWN, DOWN)
        return None

    def bootstrap(self, server: str, ctx: BootstrapContext) -> BootstrapResult:
        return BootstrapResult(False, True, "echo servers are always up")

    def version(self, ctx: CallContext) -> str | None:
        return "echo 1.2.0"
