"""Secret values kept out of what mam prints and records: an `--env` value a backend's error quotes is shown as ***."""

from __future__ import annotations

from collections.abc import Sequence

HIDDEN = "***"
MIN_HIDDEN = 3  # shorter values (a flag like "1") are no secrets, and hiding them would garble every message
MIN_FRAGMENT = 8  # a piece of a value this long is hidden too: a backend may have cut or wrapped the value


def hide_values(text: str, assignments: Sequence[str]) -> str:
    """`text` with the value of each `--env` assignment (NAME=VALUE) written as ***: a backend's error, or the
    last line an agent printed as it died, may quote one, and the registry keeps only variable names. What was
    cut or wrapped before it came here (a line cut at its end, a multi-line value's first line) leaves a piece
    of the value: any run of MIN_FRAGMENT or more characters that stands in a value is hidden as well."""
    values = [v for v in (a.partition("=")[2] for a in assignments) if len(v) >= MIN_HIDDEN]
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, HIDDEN)
    pieces = [v for v in values if len(v) >= MIN_FRAGMENT]
    if not pieces:
        return text
    out, i = [], 0
    while i < len(text):
        length = _longest_piece(text, i, pieces)
        if length >= MIN_FRAGMENT:
            out.append(HIDDEN)
            i += length
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _longest_piece(text: str, start: int, values: list[str]) -> int:
    """The length of the longest run of `text` from `start` that one of `values` holds. Holding is monotone
    (a value that holds a run holds its beginning), so the length is found by bisection."""
    low, high = 0, len(text) - start
    while low < high:
        middle = (low + high + 1) // 2
        if any(text[start:start + middle] in value for value in values):
            low = middle
        else:
            high = middle - 1
    return low
