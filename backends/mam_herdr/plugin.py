"""herdr's plugin module: cheap to import. The working code is in `mam_herdr.backend`, loaded on use."""

from __future__ import annotations

import re

from mam.api import Backend, BackendSpec, ServerCommand, ServerOptions, hookimpl

# What herdr (0.8) sets in each of its panes.
MARKERS = (
    "HERDR_ENV", "HERDR_SOCKET_PATH", "HERDR_CLIENT_SOCKET_PATH", "HERDR_BIN_PATH", "HERDR_SESSION",
    "HERDR_WORKSPACE_ID", "HERDR_TAB_ID", "HERDR_PANE_ID", "HERDR_STARTUP_CWD", "HERDR_PLUGIN_*",
)
# herdr takes `--session NAME` / `--session=NAME` anywhere before a literal `--`; refused after it too, to be safe.
# `--remote HOST` attaches to a herdr server on another machine; so does 0.9's `--machine NAME`.
# `session stop|delete NAME [--json]` name their session themselves, past --session; `session attach NAME` does
# too (herdr reads it only without a --session before it, which mam always puts there, but another version may not).
SERVER_OPTIONS = ServerOptions(
    names=("--session", "--remote", "--machine"), valued=("--remote-keybindings",),
    commands=(ServerCommand(("session", "stop"), flags=("--json",)),
              ServerCommand(("session", "delete"), flags=("--json",)),
              ServerCommand(("session", "attach"))))


# What `mam backends` says of the releases (docs/backends.md, Supported versions).
DESCRIPTION = ("herdr, the agent-focused terminal multiplexer; run for real: 0.8.2 (herdrdev/herdr 1c76079f, "
               "built by hand); 0.9.x known from its changelog only (protocol 22, `--machine`), never run")


AGENT_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")  # herdr's own rule for agent names, stricter than mam's


def agent_name_rule(name: str) -> str | None:
    if AGENT_NAME.fullmatch(name):
        return None
    return (f"herdr cannot keep the agent name {name!r}: its agent names are lower-case letters, digits, '_' "
            "and '-', starting with a letter (at most 32)")


def _load() -> Backend:
    from mam_herdr.backend import HerdrBackend  # start-up: the working module, loaded on use

    return HerdrBackend()


@hookimpl
def mam_backends() -> list[BackendSpec]:
    return [BackendSpec(name="herdr", description=DESCRIPTION,
                        executable="herdr", load=_load, markers=MARKERS,
                        server_options=SERVER_OPTIONS, name_rule=agent_name_rule,
                        # `herdr server` stays in the foreground: it is started as a detached local process
                        remote_bootstrap=False,
                        spawn_env=True,  # `workspace create --env`
                        # its state comes with the listing (`agent_status`): nothing to capture
                        operations=frozenset({"spawn", "stop", "send", "client_argv"}))]
