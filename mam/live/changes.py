"""The changes of agents' states between two readings of `mam status`: what `mam watch` prints and announces,
and what the `mam top` view can announce the same way (mam.live.notify). Plain data in, plain dicts out.

A change is an agent's state becoming one of the watched states (blocked and done by default). The first reading
is the baseline: what agents are in already is not a change. A reading of `unknown` (a server that did not answer
one poll) is not a change either, unless `unknown` itself is watched: the agent keeps its last known state, so a
flaky server never makes an agent "become blocked" twice; an agent whose row appears later has no state before its
first one read (`from` null).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from mam.agents.remains import state_or_done

# Deferred imports (inside functions), for start-up: the rendering helper loads only when a change is put into words.

DEFAULT_ON = ("blocked", "done")
Key = tuple[str, str, str, str]  # host ("" here), backend, server, name


def key_of(session: Mapping[str, Any]) -> Key:
    return (session.get("host") or "", session["backend"], session["server"], session["name"])


def timestamp(now: float | None = None) -> str:
    """UTC, to the second, as the registry writes its times."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))


def change_document(session: Mapping[str, Any], before: str | None, at: str) -> dict[str, Any]:
    """One change as `mam watch --json` prints it and `--exec` gets it (docs/json.md, mam/schemas/watch.json)."""
    return {"schema": 1, "name": session["name"], "backend": session["backend"], "server": session["server"],
            "host": session.get("host"), "from": before, "to": session["state"], "at": at,
            "state_source": session.get("state_source"), "evidence": session.get("evidence")}


class Changes:
    """The last known state of every agent, and the changes each new reading makes into the `on` states."""

    def __init__(self, on: Iterable[str] = DEFAULT_ON) -> None:
        self.on = frozenset(on)
        self.known: dict[Key, str | None] = {}
        self.started = False

    def step(self, sessions: Iterable[Mapping[str, Any]], now: float | None = None,
             new_is_change: bool = True) -> list[dict[str, Any]]:
        """The changes from the last reading to `sessions` (status entries with their state), in their order.
        With `new_is_change` False (a view whose servers answer one by one), an agent's first known state is its
        own baseline: an agent first read now is not a change, and `unknown` is no baseline."""
        at = timestamp(now)
        found: list[dict[str, Any]] = []
        seen: set[Key] = set()
        for session in sessions:
            key = key_of(session)
            seen.add(key)
            state = session.get("state")
            if state is None:  # --no-state: nothing to compare
                continue
            if state_or_done(session) != state:  # its program exited 0: done, as `mam wait --until done` takes it
                state = "done"
                session = {**session, "state": state}
            before = self.known.get(key)
            if state == "unknown" and "unknown" not in self.on and (
                    key in self.known or self.started or not new_is_change):
                # One poll without an answer: the agent keeps its last known state. An agent whose row appeared
                # since the baseline has none until a state is read (its first change is `from` null); only the
                # baseline keeps `unknown`, as all it could tell.
                continue
            first = key not in self.known
            self.known[key] = state
            if first and not new_is_change:
                continue
            if self.started and state != before and state in self.on:
                found.append(change_document(session, before, at))
        for gone in set(self.known) - seen:  # a row removed (forget, prune): a later one of that name is new
            del self.known[gone]
        self.started = True
        return found


def change_text(change: Mapping[str, Any]) -> str:
    """One line for a person: `12:03:04 fixer (tmux server mam): working -> blocked: claude.permission ...`."""
    from mam.util.render import visible

    on = f" on {change['host']}" if change.get("host") else ""
    evidence = change.get("evidence") or {}
    why = evidence.get("rule") or evidence.get("field") or evidence.get("fact")
    line = evidence.get("line")
    reason = (f": {why}" if why else "") + (f": {line!r}" if line else "")
    clock = change["at"][11:19]
    return visible(f"{clock} {change['name']} ({change['backend']} server {change['server']}{on}): "
                   f"{change['from'] or 'new'} -> {change['to']}{reason}")
