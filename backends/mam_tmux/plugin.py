"""tmux's plugin module, found through the `mam.backends` entry point like any third-party backend."""

from __future__ import annotations

from mam.hookspecs import hookimpl
from mam.model import Backend, BackendSpec, ScrubRule

MARKERS = ("TMUX", "TMUX_PANE")


def _load() -> Backend:
    from mam_tmux.backend import TmuxBackend

    return TmuxBackend()


@hookimpl
def mam_backends() -> list[BackendSpec]:
    return [BackendSpec(name="tmux", description="tmux; a server is a socket name (-L NAME)", executable="tmux",
                        load=_load, markers=MARKERS)]


@hookimpl
def mam_env_scrub_rules() -> list[ScrubRule]:
    return [ScrubRule(marker, "backend tmux") for marker in MARKERS]
