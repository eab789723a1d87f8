"""`mam wait` (poll one agent's state until it is one of some states) and `mam send` (type text into its pane).

Neither starts a server: both find the agent by listing its server, and a server that is down is an error.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from mam.app import App
from mam.availability import require_binary, resolve_explicit_backend
from mam.errors import MamError
from mam.fanout import call_context, outcomes_for
from mam.names import check_name
from mam.plugin.records import AGENT_STATES, Agent, ErrorKind, ServerState
from mam.registry import Row
from mam.route import remote_route

POLL_INTERVAL = 0.5
# The shortest time limit a poll's calls get, near or past the deadline: time for a call to answer at all on a
# busy machine. A wait against a hung server so ends at most this long after its deadline.
MIN_CALL = 2.0
MAX_TEXT = 64 * 1024  # a prompt, not a file: anything longer is refused before it reaches a backend


def _row(app: App, name: str, server: str | None, host: str | None = None) -> Row:
    """The one registry row of agent `name` (of the explicit backend, `server` and `host` when given)."""
    from mam.hosts import checked_host
    from mam.rows import rows_named

    check_name(name, "agent name")
    if server is not None:
        check_name(server, "server name")
    resolve_explicit_backend(app)
    rows = rows_named(app, app.load_registry(), name, server, checked_host(host))
    if not rows:
        raise MamError("operation_failed", f"no registered agent named {name}"
                       + (f" on server {server}" if server else ""), hint="see `mam status`")
    return rows[0]


def check_text(text: str, enter: bool) -> None:
    """Text is typed as characters: a control character (a newline, an escape, Ctrl-C) would act as a key, and a
    newline would submit half a prompt. Enter is asked for with --enter, on its own."""
    if not text and not enter:
        raise MamError("usage", "nothing to send: give TEXT, --enter, or both")
    if len(text) > MAX_TEXT:
        raise MamError("usage", f"TEXT is {len(text)} characters long; at most {MAX_TEXT} are sent")
    bad = next((ch for ch in text if (ord(ch) < 32 and ch != "\t") or 127 <= ord(ch) < 160), None)
    if bad is not None:
        raise MamError("usage", f"TEXT holds the control character {bad!r}: it would act as a key, not as text",
                       hint="send one line of text; add --enter to submit it")


def _live_agent(app: App, row: Row) -> Agent:
    """The listed agent of `row`; an error when its server is down (never started here) or lists it not."""
    key = row.server_key
    outcome = outcomes_for(app, {key})[key]
    if outcome.state is ServerState.DOWN:
        raise MamError("operation_failed", f"{row.backend} server {row.server} is down; mam never starts it to "
                       "send text", hint=_bring_back(row))
    if outcome.state is ServerState.UNKNOWN:
        require_binary(app, outcome.error.kind if outcome.error else None, "mam send needs it", row.backend,
                       of_row=True)
        why = outcome.error.message if outcome.error else "no answer"
        raise MamError("operation_failed", f"{row.backend} server {row.server} could not be asked: {why}")
    agent = next((a for a in outcome.agents if a.name == row.name), None)
    if agent is None:
        raise MamError("operation_failed", f"{row.name} is not running on {row.backend} server {row.server}",
                       hint=_bring_back(row))
    return agent


def _bring_back(row: Row) -> str:
    """What to do about an agent that is not running: start it again where it was (its server with it)."""
    from mam.restoreplan import row_spec

    if row_spec(row) is None:  # adopted, or written by hand: restore has nothing to start it from
        return (f"`mam --backend {row.backend} spawn {row.name} --server {row.server} ...` starts it again (its "
                "row keeps no launch spec for `mam restore`)")
    return f"`mam restore {row.name}` starts it again from its launch spec (`--dry-run` shows how)"


def send_document(app: App, name: str, text: str, enter: bool, server: str | None = None,
                  host: str | None = None) -> dict[str, Any]:
    check_text(text, enter)
    row = _row(app, name, server, host)
    backend = app.plugins.backend(row.backend)
    app.plugins.require(backend, "send_text")  # a backend that cannot type is refused before anything runs
    agent = _live_agent(app, row)
    with remote_route(app.route(row.host)):  # typed where the agent runs
        result = app.plugins.send_text(backend, row.server, agent, text, enter, call_context(app))
    if not result.ok:
        detail = app.plugins.classify(backend, result.failure).message if result.failure else ""
        raise MamError("operation_failed", result.message + (f": {detail}" if detail else ""))
    return {"schema": 1, "name": row.name, "backend": row.backend, "server": row.server, "host": row.host,
            "pane_id": agent.pane_id,
            "characters": len(text), "enter": enter, "message": result.message}


def check_timeout(timeout: float | None) -> None:
    if timeout is not None and not (math.isfinite(timeout) and 0 < timeout <= 86400):
        raise MamError("usage", f"--timeout {timeout:g}: expected seconds, more than 0 and at most 86400")


def wait_document(app: App, name: str, until: Sequence[str], timeout: float | None, server: str | None = None,
                  on_change: Callable[[dict[str, Any]], None] | None = None,
                  host: str | None = None) -> dict[str, Any]:
    """Poll agent `name` every POLL_INTERVAL until its state is one of `until`, or `timeout` seconds pass.
    `reached` says which; `session` is its last status entry (state and evidence). A server that is down, or an
    agent its server does not list, ends the wait at once unless `unknown` is awaited (that is its state)."""
    from mam.statusview import parse_state_filter, status_document

    wanted = parse_state_filter(until, "--until")
    check_timeout(timeout)
    row = _row(app, name, server, host)
    start = time.monotonic()
    limit = app.timeout
    last: str | None = None
    while True:
        if timeout is not None:
            # A wait ends at its deadline: no call of a poll may outlast the time left (a hung server would
            # otherwise hold each poll for the whole $MAM_TIMEOUT).
            app.timeout = min(limit, max(MIN_CALL, timeout - (time.monotonic() - start)))
        doc = status_document(app, (), names=[row.name], with_state=True)
        entry = next(s for s in doc["sessions"] if s["backend"] == row.backend and s["server"] == row.server
                     and s["host"] == row.host)
        waited = round(time.monotonic() - start, 3)
        if on_change is not None and entry["state"] != last:
            on_change(entry)
        last = entry["state"]
        reached = entry["state"] in wanted
        result = {"schema": 1, "name": row.name, "backend": row.backend, "server": row.server, "host": row.host,
                  "until": sorted(wanted, key=AGENT_STATES.index),
                  "reached": reached, "waited": waited, "session": entry}
        if reached:
            return result
        server_state = next((s["state"] for s in doc["servers"] if s["backend"] == row.backend
                             and s["server"] == row.server and s["host"] == row.host), None)
        if server_state == "down":
            raise MamError("operation_failed", f"{row.backend} server {row.server} is down; mam wait never starts "
                           "it", hint=_bring_back(row))
        if entry["live"] == "absent":
            raise MamError("operation_failed", f"{row.name} is not running on {row.backend} server {row.server}",
                           hint=_bring_back(row))
        if server_state == "unknown":
            error = next((s["error"] for s in doc["servers"]
                          if s["backend"] == row.backend and s["server"] == row.server), None) or {}
            if error.get("kind") == "not_installed":
                require_binary(app, ErrorKind.NOT_INSTALLED, "mam wait needs it", row.backend, of_row=True)
        if timeout is not None and waited >= timeout:
            return result
        time.sleep(POLL_INTERVAL if timeout is None else min(POLL_INTERVAL, max(0.0, timeout - waited)))
