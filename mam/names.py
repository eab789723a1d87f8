"""Validation of the names mam hands to a backend (server names and registry row names)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from mam.errors import MamError

# docs/cli.md, "Names": starts with a letter or digit, so it can never read as an option or a shell word.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# An agent's own session id that mam hands back to it on resume (`--resume ID`): one plain word that no agent
# reads as an option or a path (a UUID, `ses_01J...`, `019a-77c1`).
SESSION_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def is_valid_name(name: object) -> bool:
    return isinstance(name, str) and NAME_PATTERN.fullmatch(name) is not None


def shown(value: str, limit: int = 80) -> str:
    """A value for a message: quoted (so no newline of it ends the line) and at most `limit` characters of it."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "..."


def closest(word: str, known: Sequence[str], cutoff: float = 0.6) -> str | None:
    """The one of `known` that `word` is most likely a typo of (`runing`: `running`), or None. Bounded: only
    the first 100 characters of a word are compared, whatever its length."""
    import difflib  # only on the error path

    close = difflib.get_close_matches(word[:100], list(known), n=1, cutoff=cutoff)
    return close[0] if close else None


def check_name(name: str, what: str = "name") -> str:
    """Return `name` unchanged, or raise `invalid_name` before anything reaches a backend."""
    if not is_valid_name(name):
        raise MamError(
            "invalid_name",
            f"invalid {what} {shown(name)}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return name
