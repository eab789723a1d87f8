"""What a user is told when a backend cannot serve a command: its program is missing (install it, or pick
another backend), or the backend they selected does not exist or load."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mam.plugin.records import ErrorKind
from mam.util.errors import MamError

if TYPE_CHECKING:
    from mam.servers.app import App


def require_binary(app: App, outcome_error_kind: ErrorKind | None, what: str, backend: str | None = None,
                   of_row: bool = False) -> None:
    """Raise exit 3 when the backend's program is missing. `of_row`: the backend is a registry row's, which
    another backend cannot reach, so the hint says only to install its program."""
    if outcome_error_kind is ErrorKind.NOT_INSTALLED:
        name = backend or app.backend_name
        spec = app.plugins.spec(name)
        raise MamError("backend_unavailable", f"{spec.executable or spec.name}: not found on PATH; {what}",
                       hint=missing_binary_hint(app, name, of_row))


def missing_binary_hint(app: App, backend: str, of_row: bool = False) -> str:
    """What to do when `backend`'s program is not on PATH: install it, or (unless it is a row's backend: its
    agent runs there, and no other backend reaches it) pick another, named as `--backend` and the workspace's
    `.mam/config.yaml` take it. Another backend whose program is on PATH is named, tmux first."""
    spec = app.plugins.spec(backend)
    program = spec.executable or spec.name
    if of_row:
        return f"install {program}: an agent registered on backend {backend} is reached only through {program}"
    import shutil

    path = app.backend_env.get("PATH")
    try:
        others = [s for s in app.plugins.specs() if s.name != backend]
    except MamError:
        others = []
    found = [s.name for s in others if s.executable and shutil.which(s.executable, path=path)]
    names = sorted(found or [s.name for s in others], key=lambda n: (n != "tmux", n))
    if not names:
        return f"install {program}"
    return (f"install {program}, or pick another backend: `mam --backend {names[0]} ...`, or `backend: {names[0]}` "
            "in .mam/config.yaml")


def resolve_explicit_backend(app: App) -> str | None:
    """An explicitly selected backend must exist and load (exit 3 or 4); its binary may still be missing."""
    explicit = app.explicit_backend
    if explicit is not None:
        app.plugins.backend(explicit)
    return explicit
