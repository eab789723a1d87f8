"""The echo backend's plugin: declares the backend and its one marker (the core scrubs it from that alone)."""

from __future__ import annotations

from mam.api import Backend, BackendSpec, hookimpl


def _load() -> Backend:
    from mam_echo.backend import EchoBackend

    return EchoBackend()


@hookimpl
def mam_backends() -> list[BackendSpec]:
    return [BackendSpec("echo", "a test backend: servers and agents from $ECHO_AGENTS", None, _load,
                        markers=("ECHO_PANE",))]

