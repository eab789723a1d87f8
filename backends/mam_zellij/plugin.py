"""zellij's plugin module, found through the `mam.backends` entry point like any third-party backend."""

from __future__ import annotations

from mam.hookspecs import hookimpl
from mam.model import Backend, BackendSpec, ScrubRule

MARKERS = ("ZELLIJ", "ZELLIJ_SESSION_NAME", "ZELLIJ_PANE_ID")


def _load() -> Backend:
    from mam_zellij.backend import ZellijBackend

    return ZellijBackend()


@hookimpl
def mam_backends() -> list[BackendSpec]:
    return [BackendSpec(name="zellij", description="zellij; a server is a session name", executable="zellij",
                        load=_load, markers=MARKERS)]


@hookimpl
def mam_env_scrub_rules() -> list[ScrubRule]:
    return [ScrubRule(marker, "backend zellij") for marker in MARKERS]
