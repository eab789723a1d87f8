"""Reading a file mam owns (the registry, the config) only when it is a regular file of a sane size.

A FIFO planted in its place would block the open, `/dev/zero` or a huge sparse file would be read until memory
runs out; each is refused in one line naming the file instead, and its bytes are left as they are.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from mam.util.errors import MamError


def read_regular(path: Path, shown: Path | str, limit: int, kind: str, hint: str | None = None, *,
                 follow: bool = True, check: Callable[[os.stat_result], None] | None = None) -> bytes | None:
    """The bytes of `path` (a link to a regular file is followed, unless `follow` is false: then refused), or None
    when there is none. Raise a MamError of `kind` naming `shown` for anything else, or for a file over `limit`
    bytes; `check` may refuse the file by its stat (its owner, its mode) before a byte is read."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MamError(kind, f"{shown}: cannot read: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MamError(kind, f"{shown}: not a regular file", hint=hint)
        if check is not None:
            check(info)
        if info.st_size > limit:
            raise MamError(kind, f"{shown}: too large ({info.st_size} bytes; at most {limit} are read)", hint=hint)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)  # the file may have grown since fstat
    except OSError as exc:
        raise MamError(kind, f"{shown}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise MamError(kind, f"{shown}: too large (more than {limit} bytes)", hint=hint)
    return data


def read_text(path: Path, shown: Path | str, limit: int, kind: str, hint: str | None = None, *,
              follow: bool = True, check: Callable[[os.stat_result], None] | None = None) -> str | None:
    """`read_regular`, decoded as UTF-8; a file that is not is refused naming its line and the byte."""
    data = read_regular(path, shown, limit, kind, hint, follow=follow, check=check)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise MamError(kind, f"{shown}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x})", hint=hint) from None


def open_unfollowed(path: Path, flags: int, mode: int, folder: str, what: str, hint: str | None = None) -> int:
    """`os.open` of `path` with neither its folder nor the file itself followed when a symbolic link was planted
    in its place: refused instead, as operation_failed naming `folder` (say "logs folder") or `what` ("log")."""
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and path.parent.is_symlink():
            raise MamError("operation_failed", f"{path.parent}: the {folder} is a symbolic link: refusing to "
                           "follow it", hint=hint) from None
        raise MamError("operation_failed", f"{path.parent}: cannot open the {folder}: {exc.strerror}") from None
    try:
        return os.open(path.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise MamError("operation_failed", f"{path}: the {what} is a symbolic link: refusing to follow it",
                           hint=hint) from None
        raise MamError("operation_failed", f"{path}: cannot open the {what}: {exc.strerror}") from None
    finally:
        os.close(dir_fd)


def lock_within(fd: int, timeout: float) -> bool:
    """Take an exclusive flock on `fd`, waiting at most `timeout` seconds: False when another holder kept it.
    A lock held by a dead process is released by the kernel; any other failure raises OSError."""
    import fcntl
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)


def open_folder(path: Path, what: str, parent_fd: int | None = None) -> int:
    """A descriptor of the folder `path` (made when missing), opened without following a symbolic link planted
    in its place: refused instead, as operation_failed naming `what` ("shim folder"). With `parent_fd`, `path`'s
    last part is opened in that folder; else the folders above `path` are made as needed and followed."""
    name: str | Path = path.name if parent_fd is not None else path
    if parent_fd is None:
        path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(3):  # made by another process between the two calls: open it again
        try:
            return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        except FileNotFoundError:
            try:
                os.mkdir(name, 0o755, dir_fd=parent_fd)
            except FileExistsError:
                pass
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(name, parent_fd):
                raise MamError("operation_failed", f"{path}: the {what} is a symbolic link: refusing to follow it",
                               hint="remove the link, or give another folder") from None
            raise
    raise MamError("operation_failed", f"{path}: cannot open the {what}")


def _is_link(name: str | Path, parent_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=parent_fd).st_mode)
    except OSError:
        return False


def replace_in(folder_fd: int, name: str, data: bytes, mode: int) -> None:
    """Write `data` as the file `name` of the folder `folder_fd`, by a new file renamed over the old one: a link
    (or anything else) at `name` is replaced, never written through, and a reader never sees half a file."""
    tmp = f".{name}.{os.urandom(6).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=folder_fd)
        except OSError:
            pass
        raise


def leads_inside(path: Path, root: Path) -> bool:
    """True when `path`, every symbolic link on the way followed (a dangling one to where it points), is `root`
    or lies below it."""
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)
