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

from mam.hooks.common import KindFile, Unparsable, command

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


def _group_is_ours(event: str, group: object, events: list[Event]) -> bool:
    """A group mam writes: in one of its events, with its matcher there (None: no key), holding one handler of
    type command running its very command. One that differs (mam by a path, another matcher or event, a second
    handler) is the user's: uninstall keeps it. Other keys (a timeout the user put in) do not make it theirs."""
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list) or len(group["hooks"]) != 1:
        return False
    handler = group["hooks"][0]
    return isinstance(handler, dict) and handler.get("type") == "command" and any(
        event == name and group.get("matcher") == matcher and handler.get("command") == command(state)
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
        for event, groups in _ours(events, extra).items():
            hooks.setdefault(event, []).extend(groups)
        return _dump(data, text)

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
        return _dump(data, text) if data else None

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
