"""`GET /metrics`: the fleet in the Prometheus text format, with the official client library, kept in a registry
of its own (never the process-wide default, so two apps in one test process never share counters)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from mam.live.topmodel import Group, ServerLine, TopRow

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.agents = Gauge("mam_agents", "Registered agents by backend, host, server and state (as mam top shows "
                            "them; ended ones by how they ended)", ["backend", "host", "server", "state"], registry=r)
        self.servers = Gauge("mam_servers", "Servers with registered agents, by state", ["state"], registry=r)
        self.state_seconds = Counter("mam_agent_state_seconds", "Seconds agents spent in each state, as the poller "
                                     "saw them", ["state"], registry=r)
        self.answered = Histogram("mam_blocked_to_answered_seconds", "Seconds from an agent becoming blocked to "
                                  "its leaving blocked", registry=r,
                                  buckets=(5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600))
        self.poll = Histogram("mam_poll_seconds", "Seconds one server's listing (with its agents' states) took",
                              ["server", "host"], registry=r,
                              buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.restores = Counter("mam_restores", "Agents restored by mam serve", registry=r)
        self.crash_loops = Counter("mam_crash_loops", "Restores held back by a crash loop (mam serve)", registry=r)
        self.streams = Gauge("mam_serve_event_streams", "Event-stream clients connected now", registry=r)
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str, str, str], tuple[str, float]] = {}  # agent -> (state, seen at)
        self._blocked: dict[tuple[str, str, str, str], float] = {}  # agent -> when it became blocked
        self._labels: set[tuple[str, str, str, str]] = set()

    def snapshot(self, rows: list[TopRow], lines: list[ServerLine], now: float) -> None:
        with self._lock:
            counts: dict[tuple[str, str, str, str], int] = {}
            for row in rows:
                labels = (row.backend, row.host or "local", row.server, row.state)
                counts[labels] = counts.get(labels, 0) + 1
            for gone in self._labels - set(counts):
                self.agents.remove(*gone)
            for labels, n in counts.items():
                self.agents.labels(*labels).set(n)
            self._labels = set(counts)
            asked = {(r.backend, r.server, r.host) for r in rows if not r.ended or r.end}  # told ends: asked
            down = {(s.backend, s.server, s.host) for s in lines if s.state == "down"}
            unknown = {(s.backend, s.server, s.host) for s in lines if s.state != "down"} - down
            self.servers.labels("down").set(len(down))
            self.servers.labels("unknown").set(len(unknown))
            self.servers.labels("up").set(len(asked - down - unknown))
            seen = {}
            for row in rows:
                if row.ended or row.stale:
                    continue
                key = row.key
                before = self._last.get(key)
                if before is not None:
                    self.state_seconds.labels(before[0]).inc(max(0.0, now - before[1]))
                    if before[0] == "blocked" and row.state != "blocked":
                        since = self._blocked.pop(key, None)
                        if since is not None:
                            self.answered.observe(max(0.0, now - since))
                if row.state == "blocked" and (before is None or before[0] != "blocked"):
                    self._blocked[key] = now
                seen[key] = (row.state, now)
            keys = {row.key for row in rows}
            self._last = {k: v for k, v in {**self._last, **seen}.items() if k in keys}
            self._blocked = {k: v for k, v in self._blocked.items() if k in keys}

    def polled(self, group: Group, seconds: float) -> None:
        self.poll.labels(group[0], group[1] or "local").observe(seconds)

    def restored(self, doc: Mapping[str, Any]) -> None:
        for agent in doc.get("agents", ()):
            if agent.get("outcome") == "restored":
                self.restores.inc()
            if agent.get("reason") == "crash_loop":
                self.crash_loops.inc()

    def text(self) -> bytes:
        return generate_latest(self.registry)
