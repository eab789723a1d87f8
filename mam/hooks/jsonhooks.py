"""Hooks in a JSON settings file of the shape Claude Code and Gemini CLI share:
`{"hooks": {EVENT: [{"matcher": M, "hooks": [{"type": "command", "command": C}]}]}}`.

mam adds one group per event it listens to, holding only its own command; removing takes out the groups that are
exactly such a group (_group_is_ours), then the event lists and the `hooks` object that this left empty."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mam.hooks import jsontext
from mam.hooks.common import KindFile, Unparsable, command, is_command

Notes = Callable[[str | None, Mapping[str, str]], tuple[str, dict[str, object]]]

Event = tuple[str, str | None, str]  # the event, its matcher (None: none), the state mam reports on it


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's keys, each once: a key twice would keep only its last value once mam writes the file back."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise Unparsable(f"the key {key[:40]!r} is in one object twice")
        data[key] = value
    return data


def _number(text: str) -> float:
    """A JSON number: NaN, Infinity and one past a float's range (1e400) are not, and mam would write them back as
    NaN or Infinity, which Codex and the others do not read as JSON."""
    value = float(text)
    if not math.isfinite(value):
        raise Unparsable(f"the number {text[:40]} is not one JSON holds")
    return value


def _parse(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text, object_pairs_hook=_unique, parse_float=_number, parse_constant=_number)
        json.dumps(data, ensure_ascii=False).encode()  # an escaped lone surrogate ("\ud800") has no UTF-8
    except UnicodeEncodeError:
        raise Unparsable("a string holds a lone surrogate (\\ud800-\\udfff), which is no text") from None
    except ValueError as exc:
        raise Unparsable(f"not JSON: {exc}") from None
    except RecursionError:
        raise Unparsable("nested deeper than mam reads") from None
    if not isinstance(data, dict):
        raise Unparsable("not a JSON object")
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict) or not all(isinstance(v, list) for v in hooks.values()):
        raise Unparsable("its `hooks` is not an object of lists")
    return data


def _indent(text: str) -> int | str | None:
    """The file's own indentation, so that the lines mam does not touch stay as they were."""
    match = re.search(r"\n([ \t]+)\S", text)
    if match is None:
        return None if text.strip() and "\n" not in text.strip() else 2
    indent = match.group(1)
    return len(indent) if set(indent) == {" "} else indent


def _dump(data: dict[str, Any], like: str | None) -> str:
    indent = _indent(like) if like is not None else 2
    text = json.dumps(data, indent=indent, ensure_ascii=False)
    text += "\n" if like is None or like.endswith("\n") else ""
    # the file's own line ends (a JSON string holds no raw newline, so each is one of the layout's)
    return text.replace("\n", "\r\n") if like is not None and "\r\n" in like else text


def _kept_layout(text: str | None, data: dict[str, Any], splice: Callable[[str], str | None]) -> str:
    """The file with mam's change made in its text (the rest byte for byte as it was: a one-line group stays one
    line), when that gives exactly `data`; else `data` written whole with the file's indentation and line ends."""
    if text is not None and text.strip():
        try:
            spliced = splice(text)
        except (IndexError, ValueError):
            spliced = None
        if spliced is not None and _same(spliced, data):
            return spliced
    return _dump(data, text)


def _same(text: str, data: dict[str, Any]) -> bool:
    try:
        return _parse(text) == data
    except Unparsable:
        return False


def _member(text: str, at: int, key: str) -> tuple[str, int, int, int] | None:
    return next((m for m in jsontext.members(text, at) if m[0] == key), None)


def _spliced_add(text: str, ours: dict[str, list[dict[str, Any]]]) -> str | None:
    root = jsontext.skip_space(text, 0)
    hooks = _member(text, root, "hooks")
    if hooks is None:
        top = jsontext.members(text, root)
        if not top:
            return None  # `{}`: nothing of the user's layout to keep
        return jsontext.add_items(text, root, [("hooks", ours)], jsontext.lead_of(text, top[0][1], outer=True))
    missing: list[tuple[str | None, Any]] = []
    for event, groups in ours.items():
        hooks = _member(text, root, "hooks")
        assert hooks is not None
        found = _member(text, hooks[2], event)
        if found is None:
            missing.append((event, groups))
            continue
        text = jsontext.add_items(text, found[2], [(None, g) for g in groups], jsontext.lead_of(text, found[1]))
    hooks = _member(text, root, "hooks")
    assert hooks is not None
    return jsontext.add_items(text, hooks[2], missing, jsontext.lead_of(text, hooks[1])) if missing else text


def _spliced_remove(text: str, events: list[Event]) -> str | None:
    root = jsontext.skip_space(text, 0)
    hooks = _member(text, root, "hooks")
    if hooks is None:
        return text
    names = [m[0] for m in jsontext.members(text, hooks[2])]
    for name in reversed(names):
        hooks = _member(text, root, "hooks")
        assert hooks is not None
        entries = jsontext.members(text, hooks[2])
        index = next(i for i, m in enumerate(entries) if m[0] == name)
        array = entries[index][2]
        values = [json.loads(text[s:e]) for s, e in jsontext.elements(text, array)]
        doomed = {i for i, group in enumerate(values) if _group_is_ours(name, group, events)}
        if not doomed:
            continue
        if len(doomed) == len(values):
            text = jsontext.remove_items(text, hooks[2], {index})
        else:
            text = jsontext.remove_items(text, array, doomed)
    hooks = _member(text, root, "hooks")
    assert hooks is not None
    if not jsontext.members(text, hooks[2]):
        index = next(i for i, m in enumerate(jsontext.members(text, root)) if m[0] == "hooks")
        text = jsontext.remove_items(text, root, {index})
    return text


def _group_is_ours(event: str, group: object, events: list[Event]) -> bool:
    """A group mam writes: in one of its events, with its matcher there (None: no key), holding one handler of
    type command running its very command. One that differs (mam by a path, another matcher or event, a second
    handler) is the user's: uninstall keeps it. Other keys (a timeout the user put in) do not make it theirs."""
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list) or len(group["hooks"]) != 1:
        return False
    handler = group["hooks"][0]
    return isinstance(handler, dict) and handler.get("type") == "command" and any(
        event == name and group.get("matcher") == matcher and is_command(handler.get("command"), state)
        for name, matcher, state in events)


def _ours(events: list[Event], extra: Callable[[str, str], dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for event, matcher, state in events:
        group: dict[str, Any] = {} if matcher is None else {"matcher": matcher}
        group["hooks"] = [{**extra(event, state), "type": "command", "command": command(state)}]
        out.setdefault(event, []).append(group)
    return out


def groups_of_ours(text: str, events: list[Event]) -> list[tuple[str, int, int]]:
    """Where mam's commands are: (event, its group's index, the command's index in the group)."""
    hooks = _parse(text).get("hooks", {})
    return [(event, g, 0) for event, groups in hooks.items() for g, group in enumerate(groups)
            if _group_is_ours(event, group, events)]


def make(agent: str, path: Callable[[Mapping[str, str]], Path], events: list[Event],
         extra: Callable[[str, str], dict[str, Any]] = lambda event, state: {}, notes: Notes | None = None,
         by_place: bool = False) -> KindFile:
    """`by_place`: the agent keys the user's trust in a hook by its place in its event's list (Codex)."""

    def add(text: str | None) -> str:
        data = _parse(text) if text is not None else {}
        hooks = data.setdefault("hooks", {})
        ours = _ours(events, extra)
        for event, groups in ours.items():
            hooks.setdefault(event, []).extend(groups)
        return _kept_layout(text, data, lambda t: _spliced_add(t, ours))

    def remove(text: str) -> str | None:
        data = _parse(text)
        hooks = data.get("hooks", {})
        for event in list(hooks):
            kept = [g for g in hooks[event] if not _group_is_ours(event, g, events)]
            if len(kept) != len(hooks[event]):
                if kept:
                    hooks[event] = kept
                else:
                    del hooks[event]
        if "hooks" in data and not hooks:
            del data["hooks"]
        return _kept_layout(text, data, lambda t: _spliced_remove(t, events)) if data else None

    def count(text: str) -> tuple[int, int]:
        hooks = _parse(text).get("hooks", {})
        # each of mam's entries found once at least (copies of one are not the others)
        found = sum(1 for entry in events if any(_group_is_ours(entry[0], g, [entry]) for g in hooks.get(entry[0], [])))
        return found, len(events)

    def moved(text: str) -> int:
        """The user's groups after one of mam's in their event's list: removing mam's moves each up."""
        hooks = _parse(text).get("hooks", {})
        out = 0
        for event, groups in hooks.items():
            ours = [_group_is_ours(event, g, events) for g in groups]
            first = ours.index(True) if True in ours else len(ours)
            out += sum(1 for mine in ours[first:] if not mine)
        return out

    return KindFile(agent, path, add, remove, count, notes, moved if by_place else None)
