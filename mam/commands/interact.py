"""`mam wait` (poll agents' states until they are in some states) and `mam send` (type text into a pane, unless
the agent is blocked on a question; `--answer` answers it; `--confirm` waits for the turn to start).

Neither starts a server: both find the agents by listing their servers (one listing and one capture per server
each time they look), and a server that is down is an error.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from mam.agents.remains import EXIT_ENDS, state_or_done
from mam.agents.rows import agent_row, listed_agent, not_running, session_entry
from mam.agents.statusview import add_ends, add_state, observe, parse_state_filter
from mam.audit.trail import audited
from mam.calls.route import remote_route
from mam.plugin.records import AGENT_STATES, Agent, ErrorKind, ServerOutcome, ServerState
from mam.registry import Row
from mam.servers.app import App
from mam.servers.availability import require_binary
from mam.servers.fanout import call_context
from mam.util.errors import MamError
from mam.util.names import check_utf8

# Deferred imports (inside functions), for start-up: send, wait and their states each load only what their own path
# needs.

POLL_INTERVAL = 0.5
# The shortest time limit a poll's calls get, near or past the deadline: time for a call to answer at all on a
# busy machine. A wait against a hung server so ends at most this long after its deadline.
MIN_CALL = 2.0
MAX_TEXT = 64 * 1024  # a prompt, not a file: anything longer is refused before it reaches a backend


def check_text(text: str, enter: bool) -> None:
    """Text is typed as characters: a control character (an escape, Ctrl-C) would act as a key, and an escape
    sequence could end a bracketed paste early (ESC[201~) and have the rest read as keys. A newline is the one
    exception: a text of several lines is sent as one paste (the backend's), never as lines that each submit.
    Enter is asked for with --enter, on its own."""
    if not text and not enter:
        raise MamError("usage", "nothing to send: give TEXT, --enter, or both")
    check_utf8(text, "TEXT")
    if len(text) > MAX_TEXT:
        raise MamError("usage", f"TEXT is {len(text)} characters long; at most {MAX_TEXT} are sent")
    bad = next((ch for ch in text if (ord(ch) < 32 and ch not in "\t\n") or 127 <= ord(ch) < 160), None)
    if bad is not None:
        raise MamError("usage", f"TEXT holds the control character {bad!r}: it would act as a key, not as text",
                       hint="send text (lines are pasted as one); add --enter to submit it")


def as_prompt(raw: str) -> str:
    """Text read from a file or stdin as it is sent: line ends as newlines, the last line's end dropped (a file
    ends with one; it is --enter that submits)."""
    return raw.replace("\r\n", "\n").rstrip("\n")


# The states that show a prompt was taken (`--confirm`): a turn started, so the agent works, or asks something.
# An answer was taken when the question is gone, whatever the agent does next (`agentstate.asks_nothing`).
TURN_STARTED = ("working", "blocked")


def _looked(app: App, row: Row) -> tuple[Agent, dict[str, Any]]:
    """The listed agent of `row` and its status entry with its state: one listing and one capture of its server,
    as `mam status` reads them. An error when its server is down (never started here) or lists it not."""

    key = row.server_key
    outcomes, states = observe(app, [row])
    outcome = outcomes[key]
    agent = listed_agent(app, row, outcome, "mam send")
    entry = session_entry(row, outcome)
    add_state(entry, outcome, states.get(key, {}))
    return agent, entry


def question_of(entry: dict[str, Any]) -> str:
    """What a blocked agent asks, as its state's evidence shows it (the screen line its rule matched)."""
    from mam.util.render import visible

    evidence = entry.get("evidence") or {}
    line = evidence.get("line")
    if isinstance(line, str) and line.strip():
        return visible(repr(line.strip()))
    fact = evidence.get("fact") or evidence.get("rule")
    return visible(f"({fact})") if fact else f"({entry['backend']} says it waits for an answer)"


def check_confirm(confirm: float | None) -> None:
    if confirm is not None and not (math.isfinite(confirm) and 0 < confirm <= 3600):
        raise MamError("usage", f"--confirm {confirm:g}: expected seconds, more than 0 and at most 3600")


@audited("send")
def send_document(app: App, name: str, text: str, enter: bool, server: str | None = None,
                  host: str | None = None, answer: bool = False, confirm: float | None = None) -> dict[str, Any]:
    """Type `text` (and Enter) into agent `name`'s pane. Its state is read first: a prompt to a `blocked` agent
    is refused (it would land in the question's dialog), and `answer` (--answer) is sent only to a blocked
    one. `confirm` waits that long for the agent to show it took the text (`_confirmed`) and says what it saw."""
    check_text(text, enter)
    check_confirm(confirm)
    row = agent_row(app, name, server, host)
    backend = app.plugins.backend(row.backend)
    app.plugins.require(backend, "send_text")  # a backend that cannot type is refused before anything runs
    if "\n" in text and not getattr(backend, "pastes_lines", False):  # it would type each line and submit it
        raise MamError("operation_failed", f"the {row.backend} backend cannot send several lines as one paste; "
                       "nothing was sent", hint="send the text as one line", refusal=True)
    agent, entry = _looked(app, row)
    state = entry["state"]
    if state == "blocked" and not answer:
        raise MamError("operation_failed", f"{row.name} is blocked on a question: {question_of(entry)}; a prompt "
                       "would land in it, so nothing was sent",
                       hint=f"answer it with `mam send {row.name} --answer TEXT` (add --enter to submit)", refusal=True)
    if answer and state != "blocked":
        raise MamError("operation_failed", f"{row.name} is {state}, not blocked: there is no question to answer; "
                       "nothing was sent", hint=f"send a prompt with `mam send {row.name} TEXT`",
                       refusal=True)
    with remote_route(app.route(row.host)):  # typed where the agent runs
        result = app.plugins.send_text(backend, row.server, agent, text, enter, call_context(app))
    if not result.ok:
        detail = app.plugins.classify(backend, result.failure).message if result.failure else ""
        raise MamError("operation_failed", result.message + (f": {detail}" if detail else ""))
    doc: dict[str, Any] = {
        "schema": 1, "name": row.name, "backend": row.backend, "server": row.server, "host": row.host,
        "pane_id": agent.pane_id, "characters": len(text), "lines": text.count("\n") + 1 if text else 0,
        "enter": enter, "answer": answer, "state_before": state, "message": result.message,
        "delivered": None, "state_after": None, "waited": None, "confirmation": None}
    if confirm is not None:
        doc.update(_confirmed(app, row, confirm, entry, answer))
    return doc


def _working(entry: dict[str, Any]) -> bool:
    """Whether the agent was in a turn: `working`, or a working screen gone stale (`unknown`)."""
    from mam.agents.agentstate import STALE

    fact = (entry.get("evidence") or {}).get("fact") or ""
    return entry["state"] == "working" or (entry["state"] == "unknown" and fact.startswith(STALE))


def _confirmed(app: App, row: Row, confirm: float, before: dict[str, Any], answer: bool) -> dict[str, Any]:
    """Poll the agent's state until it shows the text was taken, at most `confirm` seconds: `delivered` says
    whether it did, `confirmation` what mam saw. A prompt was taken when a turn started (working or blocked); an
    answer when the question is gone (`asks_nothing`). A prompt to an agent already in a turn is looked at once
    and is neither: no state of it can show that it took the text (delivered null)."""
    from mam.agents.agentstate import asks_nothing

    start = time.monotonic()
    limit = app.timeout
    unsure = not answer and _working(before)
    try:
        while True:
            # No look outlasts the time left (at least MIN_CALL, so that a call can answer at all).
            app.timeout = min(limit, max(MIN_CALL, confirm - (time.monotonic() - start)))
            entry = _poll(app, [row])[0][0]
            waited = round(time.monotonic() - start, 3)
            delivered = asks_nothing(entry) if answer else entry["state"] in TURN_STARTED
            if unsure or delivered or waited >= confirm or entry["live"] == "absent":
                return {"delivered": None if unsure else delivered, "state_after": entry["state"],
                        "waited": waited, "confirmation": _seen(row.name, before, entry, answer, unsure, delivered)}
            time.sleep(min(POLL_INTERVAL, max(0.0, confirm - waited)))
    finally:
        app.timeout = limit


def _seen(name: str, before: dict[str, Any], after: dict[str, Any], answer: bool, unsure: bool,
          delivered: bool) -> str:
    """What the last look showed, in words: why `delivered` is true, false or null."""
    from mam.util.render import visible

    now = after["state"]
    fact = (after.get("evidence") or {}).get("fact")
    why = f" ({visible(fact)})" if now == "unknown" and fact else ""
    if unsure:
        return (f"{name} was already {before['state']} when the text was sent: no state of it can show whether "
                f"it took the text (it is {now}{why} now)")
    if after["live"] == "absent":
        return f"{name} is no longer running"
    if answer:
        if delivered:
            return f"the question is gone: {name} is {now}{why}"
        if now == "blocked":
            return f"{name} still asks {question_of(after)}"
        return f"{name} is {now}{why}: mam cannot tell whether the question is still there"
    if delivered:
        return f"a turn started: {name} was {before['state']} and is {now}"
    return f"no turn started: {name} is still {now}{why}"


def _poll(app: App, rows: Sequence[Row]) -> list[tuple[dict[str, Any], ServerOutcome | None]]:
    """The status entry (state read) of each of `rows`, in their order, with its server's outcome: one listing
    and one capture per server, however many of its agents the rows name."""

    outcomes, states = observe(app, rows)
    polled = []
    for row in rows:
        outcome = outcomes.get(row.server_key)
        entry = session_entry(row, outcome)
        add_state(entry, outcome, states.get(row.server_key, {}))
        polled.append((entry, outcome))
    add_ends(app, [(row, entry, outcome) for row, (entry, outcome) in zip(rows, polled, strict=True)])
    return polled


def is_reached(entry: dict[str, Any], wanted: frozenset[str]) -> bool:
    """Whether the agent of status entry `entry` is in one of the states `wanted`. `done` is also met by an
    agent whose program finished (exited 0): its work is over, as a turn's is."""
    return entry["state"] in wanted or state_or_done(entry) in wanted


def check_timeout(timeout: float | None) -> None:
    if timeout is not None and not (math.isfinite(timeout) and 0 < timeout <= 86400):
        raise MamError("usage", f"--timeout {timeout:g}: expected seconds, more than 0 and at most 86400")


def _gone(app: App, row: Row, outcome: ServerOutcome | None, entry: dict[str, Any]) -> MamError | None:
    """Why agent `row` can never reach a state but `unknown`: its server is down, or up without it. A backend
    binary that is missing is raised at once (exit 3)."""

    if outcome is not None and outcome.state is ServerState.DOWN:
        return not_running(row, f"{row.backend} server {row.server} is down; mam wait never starts it")
    if entry["live"] == "absent":
        fresh = {k: entry.get(k) for k in ("exit_status", "exit_signal", "last_output")}
        known = entry.get("end") in EXIT_ENDS
        return not_running(row, f"{row.name} is not running on {row.backend} server {row.server}",
                           fresh if known else None)
    if outcome is not None and outcome.error is not None and outcome.error.kind is ErrorKind.NOT_INSTALLED:
        require_binary(app, ErrorKind.NOT_INSTALLED, "mam wait needs it", row.backend, of_row=True)
    return None


def wait_document(app: App, name: str, until: Sequence[str], timeout: float | None, server: str | None = None,
                  on_change: Callable[[dict[str, Any]], None] | None = None,
                  host: str | None = None) -> dict[str, Any]:
    """Poll agent `name` every POLL_INTERVAL until its state is one of `until`, or `timeout` seconds pass.
    `reached` says which; `session` is its last status entry (state and evidence). A server that is down, or an
    agent its server does not list, ends the wait at once unless `unknown` is awaited (that is its state)."""
    doc = wait_many_document(app, [name], until, timeout, server, on_change, host)
    agent = doc["agents"][0]
    return {"schema": 1, "name": agent["name"], "backend": agent["backend"], "server": agent["server"],
            "host": agent["host"], "until": doc["until"], "reached": doc["reached"], "waited": doc["waited"],
            "session": agent["session"]}


def wait_many_document(app: App, names: Sequence[str], until: Sequence[str], timeout: float | None,
                       server: str | None = None, on_change: Callable[[dict[str, Any]], None] | None = None,
                       host: str | None = None, any_of: bool = False) -> dict[str, Any]:
    """Poll agents `names` every POLL_INTERVAL until each of them (`any_of`: one of them) is in one of the
    states `until`, or `timeout` seconds pass. Each round asks each of their servers once (one listing, one
    capture), however many of the agents it holds. An agent whose server is down, or which its server does not
    list, ends a wait for all of them at once (unless `unknown` is awaited: that is its state); a wait for any
    of them waits on the others, and ends when none is left."""

    wanted = parse_state_filter(until, "--until")
    check_timeout(timeout)
    if len(set(names)) != len(names):
        raise MamError("usage", "an agent is named twice: give each NAME once")
    rows = [agent_row(app, name, server, host) for name in names]
    start = time.monotonic()
    limit = app.timeout
    active = list(rows)  # a wait for any of them stops asking about an agent that is gone
    last: dict[str, dict[str, Any]] = {}
    rounds = 0
    try:
        while True:
            if timeout is not None:
                # A wait ends at its deadline: no call of a poll may outlast the time left (a hung server would
                # otherwise hold each poll for the whole $MAM_TIMEOUT).
                app.timeout = min(limit, max(MIN_CALL, timeout - (time.monotonic() - start)))
            polled = list(zip(active, _poll(app, active), strict=True))
            rounds += 1
            waited = round(time.monotonic() - start, 3)
            for row, (entry, _) in polled:
                if on_change is not None and entry["state"] != last.get(row.name, {}).get("state"):
                    on_change(entry)
                last[row.name] = entry
            done_now = [is_reached(last[r.name], wanted) for r in rows]
            done = any(done_now) if any_of else all(done_now)
            if not done:
                gone = [(row, error) for row, (entry, outcome) in polled
                        if not is_reached(entry, wanted) and (error := _gone(app, row, outcome, entry)) is not None]
                if gone and (not any_of or len(gone) == len(active)):
                    raise gone[0][1]
                active = [r for r in active if all(r is not row for row, _ in gone)]
            if done or (timeout is not None and waited >= timeout):
                return _waited(rows, last, wanted, done, waited, rounds, any_of)
            time.sleep(POLL_INTERVAL if timeout is None else min(POLL_INTERVAL, max(0.0, timeout - waited)))
    finally:
        app.timeout = limit


def _waited(rows: Sequence[Row], entries: dict[str, dict[str, Any]], wanted: frozenset[str], reached: bool,
            waited: float, rounds: int, any_of: bool) -> dict[str, Any]:
    return {"schema": 1, "until": sorted(wanted, key=AGENT_STATES.index), "mode": "any" if any_of else "all",
            "reached": reached, "waited": waited, "polls": rounds,
            "agents": [{"name": r.name, "backend": r.backend, "server": r.server, "host": r.host,
                        "reached": is_reached(entries[r.name], wanted), "session": entries[r.name]} for r in rows]}
