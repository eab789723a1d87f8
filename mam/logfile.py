"""Server logs under `.mam/logs`, opened so that a planted symbolic link is never followed.

Anyone who can write into the workspace can plant `.mam/logs/tmux-NAME.log -> ~/.bashrc` (or make `logs`
itself a link) and have the next bootstrap append a server's output to a file of their choosing. The folder
is opened without following a link, the log inside it the same way, and only a regular file with no other
name is appended to.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path
from typing import BinaryIO, TextIO

from mam.errors import MamError

_HINT = "remove it: mam creates its logs itself"


def open_log(path: Path) -> BinaryIO:
    """`path` opened for appending (created 0644 when missing); raise a MamError for a link or a non-file."""
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and path.parent.is_symlink():
            raise MamError("operation_failed", f"{path.parent}: the logs folder is a symbolic link: refusing to "
                           "follow it", hint=_HINT) from None
        raise MamError("operation_failed", f"{path.parent}: cannot open the logs folder: {exc.strerror}") from None
    try:
        # O_NONBLOCK: a planted FIFO must not hang the open; it is refused below.
        fd = os.open(path.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise MamError("operation_failed", f"{path}: the log is a symbolic link: refusing to follow it",
                           hint=_HINT) from None
        raise MamError("operation_failed", f"{path}: cannot open the log: {exc.strerror}") from None
    finally:
        os.close(dir_fd)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(fd)
        what = "has another name (a hard link)" if stat.S_ISREG(info.st_mode) else "is not a regular file"
        raise MamError("operation_failed", f"{path}: the log {what}: refusing to write to it", hint=_HINT)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab")


def open_text_log(path: Path) -> TextIO:
    """`open_log` for text, UTF-8."""
    return io.TextIOWrapper(open_log(path), encoding="utf-8")
