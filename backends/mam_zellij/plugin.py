"""zellij's plugin module, found through the `mam.backends` entry point like any third-party backend."""

from __future__ import annotations

from mam.api import Backend, BackendSpec, ServerCommand, ServerOptions, hookimpl
from mam_zellij import MARKERS

# zellij's own options come before its subcommand (clap, none of them global): `--session`/`-s` picks a session,
# the hidden `--server PATH` runs a server on any socket. After the subcommand `-s` is its own (`ls -s`).
# Its session subcommands name their session themselves and ignore --session. attach and watch take a unique
# prefix when the name is not running (attach -c/-b match exactly); switch-session moves the session's clients
# to another; rename-session gives the session mam names another name, lost to mam; the *-all-sessions and web
# (which serves every session) reach all of them. Aliases are listed as spelled.
_ATTACH_FLAGS = ("-c", "--create", "-b", "--create-background", "-f", "--force-run-commands")
COMMANDS = (
    *(ServerCommand((word,), flags=_ATTACH_FLAGS, prefix=True) for word in ("attach", "a")),
    *(ServerCommand((word,), prefix=True) for word in ("watch", "w")),
    *(ServerCommand((word,)) for word in ("kill-session", "k")),
    *(ServerCommand((word,), flags=("-f", "--force")) for word in ("delete-session", "d")),
    *(ServerCommand((action, word)) for action in ("action", "ac") for word in ("switch-session", "rename-session")),
    *(ServerCommand((word,), every=True) for word in ("kill-all-sessions", "ka", "delete-all-sessions", "da", "web")),
)
SERVER_OPTIONS = ServerOptions(
    names=("--session", "-s", "--server"),
    valued=("--max-panes", "--data-dir", "--layout", "-l", "--layout-string", "--new-session-with-layout", "-n",
            "--config", "-c", "--config-dir"),
    before_command=True, commands=COMMANDS)


def _load() -> Backend:
    from mam_zellij.backend import ZellijBackend  # start-up: the working module, loaded on use

    return ZellijBackend()


@hookimpl
def mam_backends() -> list[BackendSpec]:
    return [BackendSpec(name="zellij", description="zellij; a server is a session name", executable="zellij",
                        load=_load, markers=MARKERS, server_options=SERVER_OPTIONS,
                        program_check=True,
                        operations=frozenset({"spawn", "stop", "send", "capture", "client_argv", "remains"}))]
