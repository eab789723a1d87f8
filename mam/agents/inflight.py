"""Spawns in flight: a spawn (or restore) holds an flock on `.mam/locks/spawn-TOKEN.lock` from before it claims
its row (`starting`, with that `spawn_token`) until it has written the outcome. `reconcile` leaves a `starting`
row alone while that lock is held: its agent may not be listed yet, but it is no drift. The kernel drops the lock
when its holder dies, however it dies, so a row left by a killed spawn is settled as before."""

from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path

from mam.util.errors import MamError
from mam.util.safefile import open_unfollowed

TOKEN = "spawn_token"  # the row field that names the spawn (or restore) that claimed it
_TOKEN = re.compile(r"[0-9a-f]{16}")  # what spawn writes (secrets.token_hex(8)); anything else was never held
_held: dict[str, tuple[int, Path]] = {}  # token: (fd, path) of the locks this process holds


def lock_path(dot_mam: Path, token: str) -> Path:
    return dot_mam / "locks" / f"spawn-{token}.lock"


def hold(dot_mam: Path, token: str) -> None:
    """Lock `token` for this process until `release` (or its exit). Raises MamError when it cannot."""
    if not _TOKEN.fullmatch(token):
        raise ValueError(f"not a spawn token: {token!r}")
    locks = dot_mam / "locks"
    hint = "remove it: mam creates its locks itself"
    try:
        locks.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MamError("operation_failed", f"{locks}: cannot create the locks folder: {exc.strerror or exc}",
                       hint=hint if locks.is_symlink() else None) from None
    path = lock_path(dot_mam, token)
    fd = open_unfollowed(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600, "locks folder", "spawn lock", hint)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh file: nobody else holds it
    except OSError as exc:
        os.close(fd)
        raise MamError("operation_failed", f"{path}: cannot lock: {exc.strerror or exc}") from None
    _held[token] = (fd, path)


def release(token: str) -> None:
    """End the hold on `token` (nothing when this process holds none): the file goes, then the lock."""
    fd, path = _held.pop(token, (-1, None))
    if path is None:
        return
    try:
        path.unlink()
    except OSError:
        pass
    os.close(fd)


def in_flight(dot_mam: Path, token: object) -> bool:
    """True while a live process holds the spawn lock of `token`, or when mam cannot tell (the lock file is
    there but cannot be opened or locked): a row mam cannot rule on is left alone."""
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        return False
    try:
        fd = os.open(lock_path(dot_mam, token), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:  # released, or never taken (a row from an older mam)
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False  # a lock nobody holds: its spawn died without writing an outcome
    except OSError:  # held (EWOULDBLOCK), or it cannot be told
        return True
    finally:
        os.close(fd)
