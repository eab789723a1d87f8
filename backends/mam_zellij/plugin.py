"""zellij's plugin module, found through the `mam.backends` entry point like any third-party backend."""

from __future__ import annotations

from mam.hookspecs import hookimpl
from mam.model import Backend, BackendSpec, ScrubRule, ServerOptions

MARKERS = ("ZELLIJ", "ZELLIJ_SESSION_NAME", "ZELLIJ_PANE_ID")
# zellij's own options come before its subcommand (clap, none of them global): `--session`/`-s` picks a session,
# the hidden `--server PATH` runs a server on any socket. After the subcommand `-s` is its own (`ls -s`).
SERVER_OPTIONS = ServerOptions(
    names=("--session", "-s", "--server"),
    valued=("--max-panes", "--data-dir", "--layout", "-l", "--layout-string", "--new-session-with-layout", "-n",
            "--config", "-c", "--config-dir"),
    before_command=True)


def _load() -> Backend:
    from mam_zellij.backend import ZellijBackend

    return ZellijBackend()


@hookimpl
def mam_backends() -> list[BackendSpec]:
    return [BackendSpec(name="zellij", description="zellij; a server is a session name", executable="zellij",
                        load=_load, markers=MARKERS, server_options=SERVER_OPTIONS)]


@hookimpl
def mam_env_scrub_rules() -> list[ScrubRule]:
    return [ScrubRule(marker, "backend zellij") for marker in MARKERS]
