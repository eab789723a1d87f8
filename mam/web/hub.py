"""One poller however many clients: the `Poller` of `mam top`, driven in one background thread at top's pace,
its view turned into the fleet document once per change and handed to every event-stream client (each a bounded
queue of its own: a client that does not read loses its oldest events, never the server's memory)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mam.live.actions import Actions
from mam.live.changes import Changes
from mam.live.topmodel import Group, Pacer, Poller, ServerLine, TopRow, ago, as_sessions, fingerprint
from mam.util.errors import MamError

TICK = 0.2  # seconds between looks at the poller
QUEUE = 64  # events a slow client may have waiting


def row_document(row: TopRow, now: float) -> dict[str, Any]:
    """One row as the page shows it (the columns of `mam top`), with its ages in seconds and as `mam top` says
    them."""
    return {"name": row.name, "backend": row.backend, "server": row.server, "host": row.host or None,
            "status": row.status, "live": row.live, "state": row.state, "source": row.source, "why": row.why,
            "since": row.since, "for": ago(row.since, now), "said_at": row.said_at, "age": ago(row.said_at, now),
            "read_at": row.read_at, "stale": row.stale, "end": row.state if row.ended else None,
            "evidence": dict(row.evidence) if row.evidence is not None else None}


def server_document(line: ServerLine, now: float) -> dict[str, Any]:
    return {"backend": line.backend, "server": line.server, "host": line.host or None, "state": line.state,
            "reason": line.reason, "last_seen": line.last_seen, "text": line.text(now)}


def fleet_document(rows: list[TopRow], lines: list[ServerLine], now: float) -> dict[str, Any]:
    """`GET /api/fleet` and each `fleet` event: the view of `mam top` (blocked first, then done, the rest, the
    ended ones), the servers that could not be asked, and when (docs/serve.md)."""
    return {"schema": 1, "at": now, "rows": [row_document(r, now) for r in rows],
            "servers": [server_document(s, now) for s in lines]}


@dataclass
class Observer:
    """What the hub tells besides its clients (the metrics): each snapshot, and each server's call's time."""

    snapshot: Callable[[list[TopRow], list[ServerLine], float], None] = lambda rows, lines, now: None
    polled: Callable[[Group, float], None] = lambda group, seconds: None


@dataclass(eq=False)  # each client is itself, kept in a set
class _Client:
    queue: asyncio.Queue[tuple[str, str]]
    loop: asyncio.AbstractEventLoop


@dataclass
class Hub:
    actions: Actions
    interval: float = 1.0
    max_clients: int = 100
    observer: Observer = field(default_factory=Observer)

    def __post_init__(self) -> None:
        self.poller = Poller(self.actions.registered, self._fetch, max(2.0, self.interval))
        self.pacer = Pacer(base=self.interval, most=8 * self.interval)
        self.changes = Changes()
        self._clients: set[_Client] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._kick = threading.Event()
        self._thread: threading.Thread | None = None
        self.fleet: dict[str, Any] = fleet_document([], [], time.time())
        self.error: str | None = None
        self.published = 0  # fleet documents sent, for the tests

    def _fetch(self, group: Group) -> Mapping[str, Any]:
        begun = time.monotonic()
        try:
            return self.actions.fetch(group)
        finally:
            self.observer.polled(group, time.monotonic() - begun)

    # The loop, in its own thread.

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="mam serve poller")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._kick.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def kick(self) -> None:
        """Refresh now (after an action), at the quick pace."""
        self.pacer.reset()
        self._kick.set()

    def _run(self) -> None:
        next_refresh, seen, mark = 0.0, -1, None
        while not self._stop.is_set():
            now = time.monotonic()
            if self._kick.is_set() or now >= next_refresh:
                self._kick.clear()
                rows, lines = self.poller.snapshot()
                new_mark = fingerprint(rows, lines)
                next_refresh = now + self.pacer.next(new_mark != mark, self.poller.spent())
                mark = new_mark
                try:
                    self.poller.refresh()
                    self.error = None
                except MamError as exc:
                    self.error = f"cannot read the registry: {exc.message}"
            if self.poller.version != seen:
                seen = self.poller.version
                self._publish()
            self._kick.wait(TICK)

    def _publish(self) -> None:
        now = time.time()
        rows, lines = self.poller.snapshot()
        doc = fleet_document(rows, lines, now)
        changes = self.changes.step(as_sessions(rows), now, new_is_change=False)
        self.observer.snapshot(rows, lines, now)
        same = {k: v for k, v in doc.items() if k != "at"} == {k: v for k, v in self.fleet.items() if k != "at"}
        self.fleet = doc
        events = [] if same else [("fleet", json.dumps(doc, separators=(",", ":")))]
        events += [("change", json.dumps(c, separators=(",", ":"))) for c in changes]
        if events:
            self.published += 1
            self._send(events)

    def _send(self, events: list[tuple[str, str]]) -> None:
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            client.loop.call_soon_threadsafe(_put, client.queue, events)

    # The clients, each on the server's event loop.

    def join(self) -> _Client | None:
        """A new client's queue, the current fleet first in it; None past `max_clients`."""
        with self._lock:
            if len(self._clients) >= self.max_clients:
                return None
            client = _Client(asyncio.Queue(QUEUE), asyncio.get_running_loop())
            self._clients.add(client)
        _put(client.queue, [("fleet", json.dumps(self.fleet, separators=(",", ":")))])
        return client

    def leave(self, client: _Client) -> None:
        with self._lock:
            self._clients.discard(client)

    @property
    def clients(self) -> int:
        with self._lock:
            return len(self._clients)


def _put(queue: asyncio.Queue[tuple[str, str]], events: list[tuple[str, str]]) -> None:
    for event in events:
        if queue.full():  # a client that does not read: its oldest event goes
            queue.get_nowait()
        queue.put_nowait(event)
