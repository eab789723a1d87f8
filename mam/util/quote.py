"""How a message quotes a value it did not choose (a name, a word of a command line, a field of a hand-edited
file, a line ssh printed): on one line, and bounded whatever the value holds."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import reprlib

# "reprlib": any value (a list, a mapping, a string) quoted as Python does, so no newline of it can end the
# line, part by part with each part bounded, and so the cost too. "repr": quoted whole as Python does.
# "plain": bare when it is printable and whole, quoted otherwise (a bare cut value would pass for the whole
# one). "masked": each unprintable character written as "?", unquoted.
Quote = Literal["reprlib", "repr", "plain", "masked"]
# "text": what the quoting wrote is cut to `limit` characters, the last three "...". The others cut the value
# (a string) to `limit` characters before quoting it: "value", with "..." after its quotes; "inside", with
# "..." inside them; "unmarked", with no mark.
Cut = Literal["text", "value", "inside", "unmarked"]


def shown(value: object, limit: int = 80, *, quote: Quote = "reprlib", cut: Cut = "text") -> str:
    """`value` for a one-line message, quoted as `quote` says and at most about `limit` characters of it, cut
    as `cut` says."""
    if cut == "text":
        text = _quoted(value, quote, whole=True)
        return text if len(text) <= limit else text[:limit - 3] + "..."
    word = str(value)
    if len(word) <= limit:
        return _quoted(word, quote, whole=True)
    if cut == "inside":
        return _quoted(word[:limit] + "...", quote, whole=False)
    return _quoted(word[:limit], quote, whole=False) + ("..." if cut == "value" else "")


def _quoted(value: object, quote: Quote, whole: bool) -> str:
    if quote == "reprlib":
        return _bounded_repr().repr(value)
    if quote == "masked":
        return "".join(ch if ch.isprintable() else "?" for ch in str(value))
    if quote == "plain" and whole and isinstance(value, str) and value.isprintable():
        return value
    return repr(value)


@functools.cache
def _bounded_repr() -> reprlib.Repr:
    import reprlib  # only a message that quotes a whole value pays for it

    bounded = reprlib.Repr()
    bounded.maxstring = bounded.maxother = bounded.maxlong = 60
    bounded.maxlevel, bounded.maxlist, bounded.maxdict = 2, 4, 3
    return bounded
