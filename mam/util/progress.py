"""A line on stderr saying what mam waits for, once a wait lasts longer than about a second.

Only on a terminal: never on stdout, never when stderr is a pipe or a file, never when the caller asks for JSON.
The line is rewritten in place each second and wiped when the wait ends, so the command's own output and
messages start on a clean line.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

DELAY = 1.0  # a shorter wait shows nothing


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


@contextmanager
def waiting(what: str, enabled: bool = True, stream: TextIO | None = None) -> Iterator[None]:
    """Say `mam: WHAT (N s)...` while the body runs, from its first second on. `what` is mam's own text
    (validated names only): it is written to the terminal as it is."""
    out = sys.stderr if stream is None else stream
    if not enabled or not _is_terminal(out):
        yield
        return
    done = threading.Event()
    start = time.monotonic()
    shown = [0]  # the length of the line on screen, to wipe it

    def show() -> None:
        if done.wait(DELAY):
            return
        while True:
            width = shutil.get_terminal_size().columns - 1  # never wrap: a wrapped line cannot be wiped
            line = f"mam: {what} ({int(time.monotonic() - start)} s)..."[:max(width, 10)]
            out.write("\r" + line + " " * max(0, shown[0] - len(line)))
            out.flush()
            shown[0] = max(shown[0], len(line))
            if done.wait(1.0):
                return

    thread = threading.Thread(target=show, name="mam-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if shown[0]:
            out.write("\r" + " " * shown[0] + "\r")
            out.flush()
