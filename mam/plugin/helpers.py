"""Small helpers for backends (exported to them by mam.api): reading a multiplexer's answer, waiting for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from mam.plugin.records import CommandResult, Failure

T = TypeVar("T")


def first_line(text: str, *, strip: bool = True) -> str:
    """The first line of `text` that is not blank, stripped (as it stands with `strip=False`): what a
    multiplexer's error message says."""
    return next((line.strip() if strip else line for line in text.splitlines() if line.strip()), "")


def sent_message(how: str, text: str, name: str | None, enter: bool) -> str:
    """What a send did, in words, for `SendResult.message`: `sent 1 character to fixer and Enter`, `pasted 44
    characters to fixer`, `sent Enter to fixer`. `how` is the verb (`sent`, `pasted`)."""
    if not text:
        return f"sent Enter to {name}" if enter else f"sent nothing to {name}"
    count = len(text)
    return f"{how} {count} character{'' if count == 1 else 's'} to {name}" + (" and Enter" if enter else "")


def poll_until(check: Callable[[], T | None], *, wait: float, interval: float = 0.05) -> T | None:
    """Call `check` until it returns something other than None, at most `wait` seconds (always at least once);
    None when the time ran out. For a bootstrap waiting until its new server answers."""
    import time

    deadline = time.monotonic() + wait
    while True:
        answer = check()
        if answer is not None or time.monotonic() >= deadline:
            return answer
        time.sleep(interval)


def parse_or_failure(backend: str, server: str, result: CommandResult,
                     parse: Callable[[str], T]) -> T | Failure:
    """A backend call's answer: `parse(stdout)` when it exited 0 and parses, else the Failure to classify.
    `parse` raises ValueError on output it does not recognise."""
    if result.returncode != 0:
        return Failure(backend, server, result)
    try:
        return parse(result.stdout)
    except ValueError as exc:
        return Failure(backend, server, result, parse_error=str(exc))
