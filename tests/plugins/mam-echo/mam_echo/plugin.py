"""The echo backend's plugin: declares the backend and its one marker."""

from __future__ import annotations

from mam.api import Backend, BackendSpec, ScrubRule, hookimpl


def _load() -> Backend:
    from mam_echo.backend import EchoBackend

    return EchoBackend()


@hookimpl
def mam_backends() -> list[BackendSpec]:
    return [BackendSpec("echo", "a test backend: servers and agents from $ECHO_AGENTS", None, _load,
                        markers=("ECHO_PANE",))]


@hookimpl
def mam_env_scrub_rules() -> list[ScrubRule]:
    return [ScrubRule("ECHO_PANE", "backend echo")]
