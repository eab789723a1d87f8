"""Codex: `notify` in ~/.codex/config.toml ($CODEX_HOME), a program Codex runs at the end of each turn with the
event as a JSON argument (agent-turn-complete), which `mam report` ignores. That is Codex's only hook a settings
file gives, so a Codex agent reports `idle` and nothing else; the screen tells working and blocked.

TOML is edited line by line, never re-written: mam's two lines (a comment and `notify = [...]`) go first in the
file, where keys are top-level, and uninstall takes out exactly those lines."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mam.hooks.common import PROGRAM, KindFile, Unparsable, home

MARK = "# mam hooks install: Codex runs this at the end of each turn (`mam hooks uninstall` removes it)"
NOTIFY = f'notify = ["{PROGRAM}", "report", "idle"]'
OURS = [PROGRAM, "report", "idle"]


def config(env: Mapping[str, str]) -> Path:
    folder = env.get("CODEX_HOME")
    return (Path(folder) if folder else home(env) / ".codex") / "config.toml"


def _parse(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise Unparsable(f"not TOML: {exc}") from None
    except RecursionError:
        raise Unparsable("nested deeper than mam reads") from None


def add(text: str | None) -> str:
    data = _parse(text) if text is not None else {}
    if "notify" in data:
        raise Unparsable(f"it already has notify = {data['notify']!r}: Codex runs one notify program, and mam "
                         "would replace yours (make yours run `mam report idle` too)")
    return f"{MARK}\n{NOTIFY}\n" + (text or "")


def _our_lines(lines: list[str]) -> list[int]:
    """The indexes of the lines mam wrote: its comment and, right after it, its `notify`, among the top-level
    lines (before the first table). The same words elsewhere (a table's own `notify`) are the user's."""
    out: list[int] = []
    for i, line in enumerate(lines):
        if line.lstrip().startswith("["):
            break
        if line.rstrip("\r\n") == MARK and i + 1 < len(lines) and lines[i + 1].rstrip("\r\n") == NOTIFY:
            out += [i, i + 1]
    return out


def remove(text: str) -> str | None:
    data = _parse(text)
    lines = text.splitlines(keepends=True)
    ours = set(_our_lines(lines))
    rest = "".join(line for i, line in enumerate(lines) if i not in ours)
    if ours:  # what is left must be the file without mam's `notify` and nothing else (not a multi-line string's)
        data.pop("notify", None)
        if _parse(rest) != data:
            raise Unparsable("mam's lines are not where it wrote them: take its `notify` out by hand")
    return rest if rest or text == rest else None


def count(text: str) -> tuple[int, int]:
    ours = _parse(text).get("notify") == OURS and bool(_our_lines(text.splitlines(keepends=True)))
    return (1 if ours else 0), 1


KIND = KindFile("codex", config, add, remove, count)
