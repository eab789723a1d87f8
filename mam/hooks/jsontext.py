"""Edits to a JSON file's text in place: mam's hook groups go in and out of a user's settings file without
re-writing the rest of it (a one-line group stays one line, key order, spacing and line ends as they were).

Only for text that already parsed as JSON (mam.hooks.jsonhooks._parse): the scanner trusts its shape. Each edit is
checked by the caller against the document it should give, and falls back to a full re-write if it does not."""

from __future__ import annotations

import json
from typing import Any

_SPACE = " \t\r\n"


def skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in _SPACE:
        at += 1
    return at


def value_end(text: str, at: int) -> int:
    """The index just past the JSON value that starts at `at`."""
    first = text[at]
    if first == '"':
        at += 1
        while text[at] != '"':
            at += 2 if text[at] == "\\" else 1
        return at + 1
    if first in "{[":
        depth = 0
        while True:
            ch = text[at]
            if ch == '"':
                at = value_end(text, at)
                continue
            if ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
                if depth == 0:
                    return at + 1
            at += 1
    while at < len(text) and text[at] not in _SPACE + ",}]":
        at += 1
    return at


def elements(text: str, at: int) -> list[tuple[int, int]]:
    """The spans (start, end) of the values of the array whose `[` is at `at`."""
    spans: list[tuple[int, int]] = []
    at = skip_space(text, at + 1)
    while text[at] != "]":
        end = value_end(text, at)
        spans.append((at, end))
        at = skip_space(text, end)
        if text[at] == ",":
            at = skip_space(text, at + 1)
    return spans


def members(text: str, at: int) -> list[tuple[str, int, int, int]]:
    """The members of the object whose `{` is at `at`: (key, the key's start, its value's start and end)."""
    found: list[tuple[str, int, int, int]] = []
    at = skip_space(text, at + 1)
    while text[at] != "}":
        key_end = value_end(text, at)
        key = json.loads(text[at:key_end])
        start = skip_space(text, skip_space(text, key_end) + 1)  # past the colon
        end = value_end(text, start)
        found.append((key, at, start, end))
        at = skip_space(text, end)
        if text[at] == ",":
            at = skip_space(text, at + 1)
    return found


def closing(text: str, at: int) -> int:
    """The index of the `}` or `]` that closes the container whose opening is at `at`."""
    return value_end(text, at) - 1


def _newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def lead_of(text: str, start: int, outer: bool = False) -> str:
    """The lead of the item at `start` (`outer`: of its container, one level out)."""
    lead = _lead(text, start)
    if not outer or "\n" not in lead:
        return lead if not outer else " "
    unit = _unit(text)
    step = len(unit) if isinstance(unit, str) else unit
    return lead[:max(len(lead) - step, lead.index("\n") + 1)]


def _lead(text: str, start: int) -> str:
    """The space before the item at `start`, from the line's start when it begins a line: the indentation the
    next item of its container is given."""
    before = start
    while before > 0 and text[before - 1] in " \t":
        before -= 1
    if before > 0 and text[before - 1] == "\n":
        return _newline(text) + text[before:start]
    return " "


def _unit(text: str) -> int | str:
    """One level of the file's indentation (2 when it shows none)."""
    for line in text.splitlines():
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            indent = line[:len(line) - len(stripped)]
            return len(indent) if set(indent) == {" "} else indent
    return 2


def render(value: Any, lead: str, text: str) -> str:
    """`value` as JSON to follow `lead` (the space before it): on one line after a space, else laid out with the
    file's indentation from the lead's."""
    if "\n" not in lead:
        return json.dumps(value, ensure_ascii=False)
    indent = lead.split("\n")[-1]
    dumped = json.dumps(value, indent=_unit(text), ensure_ascii=False)
    return dumped.replace("\n", _newline(text) + indent)


def nested(lead: str, text: str) -> str:
    """The lead of an item one level inside a container whose own item has `lead`."""
    if "\n" not in lead:
        return " "
    unit = _unit(text)
    return lead + (unit if isinstance(unit, str) else " " * unit)


def _item(key: str | None, value: Any, lead: str, text: str) -> str:
    rendered = render(value, lead, text)
    return lead + (f"{json.dumps(key, ensure_ascii=False)}: {rendered}" if key is not None else rendered)


def add_items(text: str, at: int, values: list[tuple[str | None, Any]], lead: str) -> str:
    """The container whose opening is at `at` with `values` appended ((key, value) in an object, (None, value) in
    an array), laid out like its last item; an empty one gets them one level in from `lead`, its own item's."""
    spans = _spans(text, at)
    if spans:
        inner = _lead(text, spans[-1][0])
        added = "".join("," + _item(key, value, inner, text) for key, value in values)
        return text[:spans[-1][1]] + added + text[spans[-1][1]:]
    inner = nested(lead, text)
    added = ",".join(_item(key, value, inner, text) for key, value in values)
    after = (lead if "\n" in lead else " ") if values else ""
    return text[:at + 1] + added + after + text[closing(text, at):]


def _spans(text: str, at: int) -> list[tuple[int, int]]:
    """The spans of a container's items: an array's values, an object's members from key to value."""
    return elements(text, at) if text[at] == "[" else [(k, v) for _, k, _, v in members(text, at)]


def remove_items(text: str, at: int, doomed: set[int]) -> str:
    """The container at `at` without its items of the indexes `doomed`, each with the separator before it (the
    first ones: up to the first item kept)."""
    spans = _spans(text, at)
    kept = [i for i in range(len(spans)) if i not in doomed]
    if not kept:
        return text[:at + 1] + text[closing(text, at):]
    cuts = [(spans[0][0], spans[kept[0]][0])] if kept[0] > 0 else []
    cuts += [(spans[i - 1][1], spans[i][1]) for i in sorted(doomed) if i > kept[0]]
    for start, end in sorted(cuts, reverse=True):
        text = text[:start] + text[end:]
    return text
