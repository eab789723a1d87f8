"""Server logs under `.mam/logs`, opened so that a planted symbolic link is never followed.

Anyone who can write into the workspace can plant `.mam/logs/tmux-NAME.log -> ~/.bashrc` (or make `logs`
itself a link) and have the next bootstrap append a server's output to a file of their choosing. The folder
is opened without following a link, the log inside it the same way, and only a regular file with no other
name is appended to.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import BinaryIO, TextIO

from mam.util.errors import MamError
from mam.util.safefile import open_unfollowed

_HINT = "remove it: mam creates its logs itself"


def open_log(path: Path) -> BinaryIO:
    """`path` opened for appending (created 0644 when missing); raise a MamError for a link or a non-file."""
    # O_NONBLOCK: a planted FIFO must not hang the open; it is refused below.
    fd = open_unfollowed(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644, "logs folder", "log",
                         _HINT)
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
