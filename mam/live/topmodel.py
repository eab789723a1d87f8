"""The model behind `mam top`, free of any terminal library: its rows and their order, the filter, the columns
that fit a width, how often to refresh, and the poller that asks each server in a thread of its own so that a
slow or hung one never holds up the others (nor the screen, which only ever reads a snapshot)."""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mam.agents.remains import EXIT_ENDS, current_end, end_of, shown_line
from mam.registry import ACTIVE_STATUSES
from mam.util.render import why, work_brief

# The order of the rows: the agents that need a person first, then the finished ones, then the rest.
FIRST_STATES = ("blocked", "done")

# Every column, widest view first, and the order in which they are dropped as the terminal narrows: AGE (how long
# ago the state's source last said so: a hook report's age, how long a screen has been unchanged) goes first,
# then where the state came from,
# the host, the backend, the work of its worktree (WORK, shown only when an agent has one: then it is what the user
# asked to see, kept over HOST and BACKEND), how long the agent has been in its state, and its server; name,
# state and why always stay. At 80 columns: NAME SERVER STATE FOR WHY (the work then in WHY, WORK_IN_WHY).
COLUMNS = ("name", "backend", "server", "host", "state", "source", "age", "for", "work", "why")
DROP_ORDER = ("age", "source", "host", "backend", "work", "for", "server")
WIDTHS = {"name": 17, "backend": 8, "server": 17, "host": 11, "state": 8, "source": 7, "age": 5, "for": 5,
          "work": 28}
MIN_WHY = 20  # the room the reason keeps before another column is dropped
# The WHY cell when WORK is dropped (too narrow) but an agent has a worktree: its work in brackets after the reason,
# so that unsaved work never vanishes from a narrow view.
WORK_IN_WHY = "why+work"
HEADERS = {"name": "NAME", "backend": "BACKEND", "server": "SERVER", "host": "HOST", "state": "STATE",
           "source": "SOURCE", "age": "AGE", "for": "FOR", "work": "WORK", "why": "WHY"}


@dataclass(frozen=True)
class TopRow:
    """One registered agent as the view shows it. `read_at` is when its state was read (None: never yet);
    `said_at` when its source last said that state (the reading less the status entry's `state_age`; None where
    the source cannot tell); `since` when top first saw it in that state; `stale` says its server did not answer
    this time."""

    name: str
    backend: str
    server: str
    host: str  # "" for this machine
    status: str
    live: str  # alive, absent or unknown (mam status's LIVE)
    state: str
    source: str
    why: str
    read_at: float | None = None
    since: float | None = None
    stale: bool = False
    said_at: float | None = None
    evidence: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)
    ended: bool = False  # stopped, finished or failed: shown in a group of its own below the live ones
    work: str = ""  # its worktree's branch and work (render.work_brief); "" for an agent without one
    end: str | None = None  # how it ended, as its status entry says (`end`), while its row still says it runs

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.backend, self.server, self.host, self.name)

    def cells(self, now: float) -> dict[str, str]:
        """The cells by column, and WORK_IN_WHY: the reason followed by the work, for a view too narrow for WORK."""
        return {"name": self.name, "backend": self.backend, "server": self.server, "host": self.host or "local",
                "state": self.state, "source": self.source, "age": ago(self.said_at, now),
                "for": ago(self.since, now), "work": self.work, "why": self.why,
                WORK_IN_WHY: f"{self.why} [{self.work}]".lstrip() if self.work else self.why}


@dataclass(frozen=True)
class ServerLine:
    """A server that is down or could not be asked, with the reason and when it last answered."""

    backend: str
    server: str
    host: str
    state: str  # down or unknown
    reason: str
    last_seen: float | None

    def text(self, now: float) -> str:
        on = f" on {self.host}" if self.host else ""
        seen = f"; last seen {ago(self.last_seen, now)} ago" if self.last_seen is not None else "; never seen"
        return f"{self.backend} server {self.server}{on}: {self.state}: {self.reason}{seen}"


def ago(then: float | None, now: float) -> str:
    """A short age: 5s, 3m, 2h, 4d; "-" when unknown."""
    if then is None:
        return "-"
    seconds = max(0, int(now - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def turns_at(then: float | None, now: float) -> float:
    """When `ago(then, ...)` next shows another text (the next second, minute, hour or day); inf for "-"."""
    if then is None:
        return math.inf
    seconds = max(0, int(now - then))
    size = next((size for size in (86400, 3600, 60) if seconds >= size), 1)
    return then + (seconds // size + 1) * size


def redraw_at(ages: Iterable[float | None], now: float, batch: float = 10.0) -> float:
    """When the ages shown (`then`s, as `ago` takes them) next need a draw: an age in seconds when it turns; one
    in minutes or more at the next `batch`-second mark after it turns (shown up to `batch` s late, so that the
    ages of a screenful of rows, each turning once a minute at its own moment, cost a few draws a minute, not
    one a second); never sooner than a second from `now`; inf when none will change."""
    due = math.inf
    for then in ages:
        if then is not None:
            at = turns_at(then, now)
            due = min(due, at if now - then < 60 else math.ceil(at / batch) * batch)
    return max(now + 1.0, due)


def rank(row: TopRow) -> tuple[int, str, str, str, str]:
    place = len(FIRST_STATES) + 1 if row.ended else FIRST_STATES.index(row.state) if row.state in FIRST_STATES \
        else len(FIRST_STATES)
    return (place, row.name, row.backend, row.server, row.host)


def ordered(rows: Iterable[TopRow]) -> list[TopRow]:
    """blocked first, then done, then the rest, then the ended ones; by name within each."""
    return sorted(rows, key=rank)


def matches(row: TopRow, query: str) -> bool:
    """`/` filter: every word of `query` is part of the name, state, backend, server or host (any case)."""
    fields = [row.name, row.state, row.backend, row.server, row.host or "local"]
    return all(any(word in value.lower() for value in fields) for word in query.lower().split())


def filtered(rows: Iterable[TopRow], query: str) -> list[TopRow]:
    return [row for row in rows if matches(row, query)] if query.split() else list(rows)


def is_ended(row: Mapping[str, Any]) -> bool:
    """A registry row whose agent has ended: its status says so (stopped, terminated, ...). An `end` beside an
    active status is from before a restore, and says nothing now."""
    status = row.get("status")
    return isinstance(status, str) and status not in ACTIVE_STATUSES


def end_kind(row: Mapping[str, Any]) -> str:
    """How the agent ended, as `mam status` says it (mam.agents.remains.end_of: finished, failed, killed,
    stopped, lost): an exit from before its last restore says nothing of this end."""
    return end_of(row, "absent")[0] or "lost"


def _seconds(value: object) -> float | None:
    """A registry time (`2027-01-15T07:57:00Z`) in seconds; None for anything else."""
    from datetime import UTC, datetime

    if isinstance(value, str):
        try:
            return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
        except ValueError:
            return None
    return None


def ended_at(row: Mapping[str, Any]) -> float | None:
    """When it ended (end_of's time, else `stopped_at`), in seconds; None when the row cannot tell."""
    for value in (end_of(row, "absent")[1], row.get("stopped_at")):
        at = _seconds(value)
        if at is not None:
            return at
    return None


# The ends a backend tells while the registry row still says the agent runs (until a `reconcile --apply`), top
# shows in the ended group at once (issue 33, 3 and 4): remains.EXIT_ENDS. `lost` stays among the live rows: it
# needs you.


def end_text(row: Mapping[str, Any], now: float) -> str:
    """WHY of an ended agent: `exited 3: KeyError ...` (its last line), `killed by signal 9`, else
    `finished 3m ago`."""
    return end_words(end_kind(row), row if current_end(row) else {}, ended_at(row), now)


def end_words(end: str, facts: Mapping[str, Any], at: float | None, now: float) -> str:
    """end_text of an end and the facts kept of it (`exit_status`, `exit_signal`, `last_output`): a registry
    row's, or a status entry's while its row still says it runs."""
    lines = facts.get("last_output")
    # Cleaned and cut as a row keeps a line (remains.shown_line): a registry row's lines are anyone's (a clone's),
    # and WHY goes to serve's page as it is (a bidi override there turned the text around).
    shown = (shown_line(x).strip() for x in reversed(lines) if isinstance(x, str)) if isinstance(lines, list) else ()
    last = next((text for text in shown if text), "")
    status, signal = facts.get("exit_status"), facts.get("exit_signal")
    if end == "failed" and isinstance(status, int):
        return f"exited {status}" + (f": {last}" if last else "")
    if end == "killed" and isinstance(signal, int):
        return f"killed by signal {signal}" + (f": {last}" if last else "")
    return end + (f" {ago(at, now)} ago" if at is not None else "")


def question(line: str, screen: Sequence[str], around: int = 3) -> list[str]:
    """What a blocked agent asks: its evidence `line` and the `around` lines either side of its last appearance
    on `screen` (the evidence line marked `>`); the line alone when the screen no longer shows it."""
    wanted = line.strip()
    at = next((i for i in range(len(screen) - 1, -1, -1) if wanted and wanted in screen[i]), None)
    if at is None:
        return [f"> {line}"] if wanted else [f"  {text}" for text in screen[-2 * around - 1:] if text.strip()]
    return [("> " if i == at else "  ") + screen[i]
            for i in range(max(0, at - around), min(len(screen), at + around + 1))]


def cell_of(column: str, shown: Sequence[str]) -> str:
    """The key of TopRow.cells a shown column draws: WHY carries the work when WORK is not shown."""
    return WORK_IN_WHY if column == "why" and "work" not in shown else column


def columns_for(width: int, work: bool = False) -> list[str]:
    """The columns that fit `width` cells, dropping them in DROP_ORDER until the reason keeps MIN_WHY. WORK only
    when some agent has a worktree (`work`)."""
    shown = [c for c in COLUMNS if work or c != "work"]
    for column in DROP_ORDER:
        if sum(WIDTHS.get(c, 0) + 2 for c in shown) + MIN_WHY <= width:
            break
        if column in shown:
            shown.remove(column)
    return shown


def widths_for(width: int, shown: Sequence[str], longest: Mapping[str, int]) -> dict[str, int]:
    """Each shown column's width: as wide as its longest cell (`longest`, by column) or header, at most its
    WIDTHS; the reason gets the room left (after each column's padding and a scroll bar), at least MIN_WHY."""
    widths = {c: min(WIDTHS[c], max(len(HEADERS[c]), longest.get(c, 0)) + 1) for c in shown
              if c != "why"}  # + 1: a gap after the longest, which the table's own padding does not always leave
    if "why" in shown:
        widths["why"] = max(MIN_WHY, width - sum(w + 2 for w in widths.values()) - 4)
    return widths


SHARE = 0.025  # of one core: what asking the servers may cost while nothing changes


class Pacer:
    """How long to wait before the next refresh: `base` after a change, `factor` longer after each refresh that
    changed nothing, at most `most`, or at most `cost / share` when that is longer (`cost`: the CPU seconds the
    last refresh took, the view's and its clients'), so that an idle view's asking stays within `share` of one
    core however large the fleet (at 1,000 agents a refresh costs about half a second). A key press brings it
    back to `base`."""

    def __init__(self, base: float = 1.0, most: float = 8.0, factor: float = 1.5, share: float = SHARE) -> None:
        self.base, self.most, self.factor, self.share = base, most, factor, share
        self.interval = base

    def next(self, changed: bool, cost: float = 0.0) -> float:
        most = max(self.most, cost / self.share)
        self.interval = self.base if changed else min(most, self.interval * self.factor)
        return self.interval

    def reset(self) -> None:
        self.interval = self.base


Group = tuple[str, str]  # (server, host): asked together, as `mam status --server S --host H` asks them
Fetch = Callable[[Group], Mapping[str, Any]]  # a status document of that group (mam.commands.status)
Registered = Callable[[], Sequence[Mapping[str, Any]]]  # the registry's rows: name, backend, server, host, status


@dataclass
class _Asked:
    started: float | None = None  # the call in flight, when it began
    doc: Mapping[str, Any] | None = None  # the last answer
    answered: float | None = None
    error: str | None = None  # the last call raised this (a bad rules file, a registry that cannot be read)
    up: dict[tuple[str, str], float] = field(default_factory=dict)  # (backend, server) -> when it last answered up


class Poller:
    """Asks every group of servers in a thread of its own, at most one call in flight per group. A group whose
    call has taken longer than `patience` is shown as not answering: its rows `unknown`, with when it was last
    seen; its call goes on in its thread (each backend call has its own time limit) and is not asked again
    until it ends."""

    def __init__(self, registered: Registered, fetch: Fetch, patience: float = 2.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.registered, self.fetch, self.patience, self.clock = registered, fetch, patience, clock
        self._lock = threading.Lock()
        self._asked: dict[Group, _Asked] = {}
        self._since: dict[tuple[str, str, str, str], tuple[str, float]] = {}
        self._last: dict[tuple[str, str, str, str], TopRow] = {}  # each agent's last row read from an answer
        self._rows: list[Mapping[str, Any]] = []
        self.version = 0  # bumped on every answer, so the view knows when to redraw
        self.calls = 0  # fetches started, for the benchmark
        self._spent = 0.0  # CPU seconds the calls took in their own threads since the last refresh began
        self._children = _children_cpu()  # the CPU of the programs they ran, as of then

    def spent(self) -> float:
        """CPU seconds asking has cost since the last refresh began: the calls' own threads, and the programs they
        ran (a tmux client per listing and per capture), which the machine pays as well."""
        with self._lock:
            return self._spent + max(0.0, _children_cpu() - self._children)

    def refresh(self) -> int:
        """Start a call for each group with none in flight; return how many were started."""
        rows = list(self.registered())
        # A server whose agents have all ended is not asked: nothing there to read, and no "down" line for it.
        groups = {(str(r["server"]), str(r.get("host") or "")) for r in rows if not is_ended(r)}
        started = []
        with self._lock:
            self._rows = rows
            self._spent, self._children = 0.0, _children_cpu()
            # Nothing kept of a server or an agent that left the registry (a call still in flight ends first).
            for gone in [g for g, a in self._asked.items() if g not in groups and a.started is None]:
                del self._asked[gone]
            keys = {(str(r["backend"]), str(r["server"]), str(r.get("host") or ""), str(r["name"])) for r in rows}
            self._since = {key: seen for key, seen in self._since.items() if key in keys}
            for group in sorted(groups):
                asked = self._asked.setdefault(group, _Asked())
                if asked.started is None:
                    asked.started = self.clock()
                    started.append(group)
            self.calls += len(started)
            self.version += 1
        for group in started:
            threading.Thread(target=self._ask, args=(group,), daemon=True, name=f"top {group[0]}").start()
        return len(started)

    def busy(self) -> bool:
        with self._lock:
            return any(a.started is not None for a in self._asked.values())

    def _ask(self, group: Group) -> None:
        doc: Mapping[str, Any] | None = None
        error = None
        begun = time.thread_time()
        try:
            doc = self.fetch(group)
        except Exception as exc:  # one group's failure is its own line, never the end of the view
            error = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        now = self.clock()
        with self._lock:
            self._spent += time.thread_time() - begun
            asked = self._asked[group]
            asked.started = None
            asked.answered = now
            asked.error = error
            if doc is not None:
                asked.doc = doc
                for server in doc.get("servers", ()):
                    if server.get("state") == "up":
                        asked.up[(server["backend"], server["server"])] = now
            self.version += 1

    def snapshot(self) -> tuple[list[TopRow], list[ServerLine]]:
        """The rows (in view order) and the server lines, as of now."""
        now = self.clock()
        with self._lock:
            rows = list(self._rows)
            # Copied field by field: dataclasses.replace, once per server a second, was a tenth of an idle view.
            asked = {g: _Asked(a.started, a.doc, a.answered, a.error, dict(a.up)) for g, a in self._asked.items()}
            known = dict(self._last)
        sessions: dict[tuple[str, str, str, str], Mapping[str, Any]] = {}
        lines: list[ServerLine] = []
        hung: set[Group] = set()
        for group, a in sorted(asked.items()):
            server, host = group
            if a.started is not None and now - a.started > self.patience:
                hung.add(group)
                for backend in sorted({str(r["backend"]) for r in rows
                                       if (r["server"], r.get("host") or "") == group and not is_ended(r)}):
                    lines.append(ServerLine(backend, server, host, "unknown",
                                            f"no answer for {ago(a.started, now)}", a.up.get((backend, server))))
                continue
            if a.error is not None:
                lines.append(ServerLine("-", server, host, "unknown", a.error, None))
            if a.doc is None:
                continue
            for entry in a.doc.get("sessions", ()):
                sessions[(entry["backend"], entry["server"], entry.get("host") or "", entry["name"])] = entry
            for s in a.doc.get("servers", ()):
                if s.get("state") in ("down", "unknown"):
                    reason = ((s.get("error") or {}).get("message") or s["state"]).splitlines()[0] if s.get("error") \
                        else s["state"]
                    lines.append(ServerLine(s["backend"], s["server"], s.get("host") or "", s["state"], reason,
                                            a.up.get((s["backend"], s["server"]))))
        shown = []
        for r in rows:
            key = (str(r["backend"]), str(r["server"]), str(r.get("host") or ""), str(r["name"]))
            group = (key[1], key[2])
            entry = sessions.get(key)
            work = work_brief(entry["worktree"]) if entry is not None and entry.get("worktree") else ""
            if is_ended(r):  # what the registry says of its end; its server is not asked for it
                # Its worktree's work, when its server's other agents are asked: what it left unsaved.
                shown.append(TopRow(key[3], key[0], key[1], key[2], str(r.get("status") or ""), "absent",
                                    end_kind(r), "registry", end_text(r, now), since=ended_at(r), ended=True,
                                    work=work))
                continue
            answered = asked[group].answered if group in asked else None
            last = known.get(key)
            unread = entry is not None and entry["live"] == "unknown" and (entry.get("state") or "unknown") == "unknown"
            if last is not None and (group in hung or unread):
                # Its server stopped answering: the agent's last known state, marked stale with its age; FOR still
                # counts from when that state began (a hung server is no reason to say "0 blocked").
                note = "its server is not answering" if group in hung else "its server could not be asked"
                shown.append(TopRow(last.name, last.backend, last.server, last.host, last.status, "unknown",
                                    last.state, last.source, f"{last.state}, last seen {ago(last.read_at, now)} ago"
                                    f" ({note})", last.read_at, last.since, stale=True, said_at=last.said_at,
                                    evidence=last.evidence, work=last.work))
                continue
            if group in hung or entry is None:
                seen = asked[group].up.get((key[0], key[1])) if group in asked else None
                reason = "its server is not answering" if group in hung else "not read yet"
                if group in hung and seen is not None:
                    reason += f" (last seen {ago(seen, now)} ago)"
                shown.append(TopRow(key[3], key[0], key[1], key[2], str(r.get("status") or ""), "unknown",
                                    "unknown", "none", reason, seen if group in hung else None, None, stale=True))
                continue
            if entry.get("end") in EXIT_ENDS and entry["live"] != "unknown":
                # Its backend tells how it ended (a dead pane tmux keeps, a held zellij pane): the ended group now,
                # not after a reconcile writes it. `end` kept: a watch of `done` is told a finished one.
                at = _seconds(entry.get("ended_at"))
                shown.append(TopRow(key[3], key[0], key[1], key[2], str(entry.get("status") or ""), entry["live"],
                                    str(entry["end"]), "backend", end_words(str(entry["end"]), entry, at, now),
                                    answered, at, ended=True, work=work, end=str(entry["end"])))
                continue
            state = entry.get("state") or "unknown"
            reason = why(dict(entry)) or ""
            seen = asked[group].up.get((key[0], key[1]))
            if entry["live"] == "unknown" and seen is not None:  # its server could not be asked this time
                reason += f" (last seen {ago(seen, now)} ago)"
            age = entry.get("state_age")
            said = (answered - float(age)) if answered is not None and isinstance(age, int | float) else None
            fresh = TopRow(key[3], key[0], key[1], key[2], str(entry.get("status") or ""), entry["live"], state,
                           entry.get("state_source") or "none", reason, answered,
                           self._since_of(key, state, answered or now), said_at=said, evidence=entry.get("evidence"),
                           work=work, end=entry.get("end"))
            if entry["live"] != "unknown" and state != "unknown":
                known[key] = fresh
            shown.append(fresh)
        with self._lock:  # nothing kept of an agent that left the registry
            self._last = {k: v for k, v in known.items() if k in self._since}
        return ordered(shown), lines

    def _since_of(self, key: tuple[str, str, str, str], state: str, at: float) -> float:
        """When top first saw this agent in `state` (as long as it stays in it)."""
        with self._lock:
            seen = self._since.get(key)
            if seen is None or seen[0] != state:
                self._since[key] = seen = (state, at)
            return seen[1]


def _children_cpu() -> float:
    """CPU seconds of this process's ended children (its tmux clients, once waited for)."""
    times = os.times()
    return times.children_user + times.children_system


def fingerprint(rows: Sequence[TopRow], lines: Sequence[ServerLine]) -> tuple[Any, ...]:
    """What a refresh could change, without the ages: equal fingerprints mean nothing happened."""
    return (tuple((r.key, r.status, r.live, r.state, r.source, r.why if not (r.stale or r.ended) else "", r.stale,
                   r.work) for r in rows),
            tuple((s.backend, s.server, s.host, s.state) for s in lines))


def as_sessions(rows: Iterable[TopRow]) -> list[dict[str, Any]]:
    """The rows as the status entries mam.live.changes compares (`mam top --notify`): a row not read this time (its
    server not answering, or not asked yet) is `unknown`, which keeps its last known state."""
    return [{"name": r.name, "backend": r.backend, "server": r.server, "host": r.host or None,
             # An end its backend told (EXIT_ENDS) is given back as its status entry says it: state unknown.
             "state": "unknown" if r.stale or (r.ended and r.end) else r.state,
             "state_source": None if r.stale else r.source,
             "evidence": None if r.stale else (dict(r.evidence) if r.evidence is not None else None),
             # A program that exited 0 is `done` to a watch of it (mam.live.changes), as to `mam wait`.
             "end": None if r.stale else r.end} for r in rows]
