"""Reading a screen within its time limit wherever the caller runs. On the main thread a timer signal bounds
each rule (mam.kinds.classify); off it no signal arrives and Python's `re` holds the GIL while it matches, so a
child process reads the screen under the same limit and is killed when it does not answer (mam.kinds.worker)."""

from __future__ import annotations

import threading

from mam.kinds.classify import Verdict, classify_screen
from mam.kinds.library import Library


def read_screen(library: Library, kind: str | None, text: str, budget: float | None = None,
                below_cursor: int | None = None) -> Verdict:
    """`classify_screen`'s verdict, never held past `budget` by a rule that runs away, on any thread."""
    if budget is not None and threading.current_thread() is not threading.main_thread():
        from mam.kinds.worker import reader  # start-up: the child's machinery loads only off the main thread

        return reader().classify(library, kind, text, budget, below_cursor)
    return classify_screen(library, kind, text, budget, below_cursor)
