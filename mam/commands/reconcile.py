"""`mam reconcile`: the registry against what the servers really say, as drift (docs/json.md).

Rows whose server is `unknown` get no drift, ever: an unanswered question is not an answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mam import registry
from mam.agents import inflight
from mam.agents.rows import live_agent, snapshot, unchanged_rows
from mam.audit.trail import OUTCOMES, Entry, audited
from mam.plugin.records import Agent, ServerOutcome, ServerState
from mam.registry import Row, RowKey
from mam.servers.app import App
from mam.servers.availability import resolve_explicit_backend
from mam.servers.fanout import ServerKey, listed_order, outcomes_for
from mam.util.errors import MamError
from mam.util.names import is_valid_name

# Deferred imports (inside functions), for start-up: spec signing, the remains and restore's plan load only for
# --apply and --restore.


@dataclass(frozen=True)
class Drift:
    # A: registered active but absent; B: live but unregistered; C: registered inactive but alive; D: alive, and its
    # server reports a resumable session the row does not hold
    cls: str
    name: str | None
    backend: str
    server: str
    status: str | None
    live: str
    action: str
    agent: Agent | None = None  # for B
    reason: str = ""  # for A: why it is taken as terminated
    seen: dict[str, Any] | None = field(default=None, compare=False)  # for A and C: the row as it was planned on
    host: str | None = None  # the server's SSH destination; None: this machine
    session: str | None = None  # for D: the session id the server reports

    def as_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"class": self.cls, "name": self.name, "backend": self.backend,
                               "server": self.server, "host": self.host, "status": self.status, "live": self.live,
                               "action": self.action}
        if self.cls == "B":
            doc["agent"] = self.agent.agent if self.agent else None
            doc["pane_id"] = self.agent.pane_id if self.agent else None
        if self.cls == "D":
            doc["agent_session"] = self.session
        return doc

    @property
    def key(self) -> RowKey:
        return (self.backend, self.server, self.name or "", self.host or "")

    @property
    def sort_key(self) -> tuple[str, str, str, str, str]:
        return (self.cls, self.host or "", self.backend, self.server, self.name or "")


def _absence_reason(row: Row, outcome: ServerOutcome) -> str:
    where = f" on {row.host}" if row.host else ""
    if outcome.state is ServerState.DOWN:
        return f"{row.backend} server {row.server}{where} is down"
    return f"absent from {row.backend} server {row.server}{where}"


def find_drifts(rows: list[Row], outcomes: Mapping[ServerKey, ServerOutcome], adopt: bool,
                in_flight: frozenset[RowKey] = frozenset()) -> list[Drift]:
    """`in_flight`: the keys of `starting` rows a spawn or restore still owns (mam.agents.inflight): not listed yet is
    no drift for them."""
    drifts: list[Drift] = []
    registered = {r.key for r in rows}
    for row in rows:
        outcome = outcomes[row.server_key]
        live, agent = live_agent(row, outcome)
        # Only a session of the agent the row is about: a pane that now runs another kind reports that one's.
        kind = row.agent or (row.spec or {}).get("kind")
        if (live == "alive" and agent is not None and agent.session and agent.session != row.agent_session
                and (kind is None or agent.agent is None or agent.agent == kind)):
            drifts.append(Drift("D", row.name, row.backend, row.server, row.status, live, "record_session",
                                seen=snapshot(row), host=row.host, session=agent.session))
        if live == "absent" and row.active and row.key not in in_flight:
            drifts.append(Drift("A", row.name, row.backend, row.server, row.status, live, "mark_terminated",
                                reason=_absence_reason(row, outcome), seen=snapshot(row), host=row.host))
        elif live == "alive" and (not row.active or row.status == "starting"):  # a start with no clear answer
            drifts.append(Drift("C", row.name, row.backend, row.server, row.status, live, "mark_running",
                                seen=snapshot(row), host=row.host))
    for (backend, server, host), outcome in outcomes.items():
        for agent in outcome.agents:
            if agent.name is not None and (backend, server, agent.name, host) in registered:
                continue
            can_adopt = adopt and agent.name is not None and is_valid_name(agent.name)
            drifts.append(Drift("B", agent.name, backend, server, None, "alive", "adopt" if can_adopt else "report",
                                agent=agent, host=host or None))
    return sorted(drifts, key=lambda d: d.sort_key)


def _record_session(row: Row, session: str, key: bytes | None) -> None:
    """Drift D: the session the server reports, in the row. The session is part of what a spec's signature
    covers (restore resumes it): a row whose signature held is signed again with it, any other stays unsigned."""
    from mam.agents import specsign

    signed = row.spec is not None and key is not None and specsign.verdict(
        key, row.raw.get(specsign.FIELD), _signed_fields(row, row.agent_session), row.spec) == specsign.SIGNED
    row.raw["agent_session"] = session
    if signed:
        assert key is not None and row.spec is not None
        row.raw[specsign.FIELD] = specsign.sign(key, _signed_fields(row, session), row.spec)


def _signed_fields(row: Row, session: str | None) -> dict[str, Any]:
    from mam.agents import specsign

    return specsign.row_fields(row.name, row.backend, row.server, row.host, row.agent, session)


def _spec_key(app: App) -> bytes | None:
    """This user's launch spec key, or None: without a usable one a recorded session leaves the spec unsigned
    (restore then says why, and asks before it runs it)."""
    from mam.agents import specsign

    try:
        return specsign.load_key(app.env)
    except MamError:
        return None


def make_change(drifts: list[Drift], written: list[Drift], key: bytes | None = None,
                ended: Mapping[RowKey, dict[str, Any]] | None = None) -> registry.Change:
    """The fixes, applied to the freshly re-read registry under its lock; each one written lands in `written`.
    `key`: this user's launch spec key, to sign a recorded session into a signed row. `ended`: how the agents of
    drift A rows ended (mam.agents.remains), read from the panes their backend keeps.

    The listing the plan rests on is older than this re-read: a row that changed meanwhile in any way (a
    re-spawn, a stop, a hand edit) is no longer the row that listing was about, and is left alone."""

    seen = {d.key: d.seen for d in drifts if d.seen is not None}

    def change(document: dict[str, Any], rows: tuple[Row, ...]) -> bool:
        registered = {r.key for r in rows}
        unchanged = {r.key: r for r in unchanged_rows(rows, seen)}
        now = registry.timestamp()
        for drift in drifts:
            row = unchanged.get(drift.key)
            if drift.cls == "A" and row is not None:
                row.raw["status"] = "terminated"
                row.raw["terminated_at"] = now
                row.raw["terminated_reason"] = drift.reason
                row.raw.update((ended or {}).get(drift.key, {}))
                written.append(drift)
            elif drift.cls == "C" and row is not None:
                row.raw["status"] = "running"
                written.append(drift)
            elif drift.cls == "D" and row is not None and drift.session:
                _record_session(row, drift.session, key)
                written.append(drift)
            elif (drift.cls == "B" and drift.action == "adopt" and drift.key not in registered
                  and drift.agent is not None):
                sessions = document.get(registry.SESSIONS)
                if sessions is None:
                    sessions = document[registry.SESSIONS] = []
                pane = {k: v for k, v in (("cwd", drift.agent.cwd), ("id", drift.agent.pane_id)) if v is not None}
                new_row: dict[str, Any] = {"name": drift.name, "backend": drift.backend, "server": drift.server,
                                           "status": "running"}
                if drift.host:
                    new_row["host"] = drift.host
                if drift.agent.agent is not None:
                    new_row["agent"] = drift.agent.agent
                if pane:
                    new_row["pane"] = pane
                new_row["adopted_at"] = now
                sessions.append(new_row)
                written.append(drift)
        return bool(written)

    return change


def _each_fixed(doc: dict[str, Any]) -> list[Entry]:
    """The audit trail's line per row --apply fixed (drift A, C, D, or B adopted), then per agent --restore ran."""
    entries: list[Entry] = [(d["name"], "ok", f"drift {d['class']}: {d['action']}") for d in doc["drifts"]
                            if d["class"] in "ACD" or d["action"] == "adopt"]
    restored = doc.get("restore") or {"agents": []}
    return entries + [(a["name"], OUTCOMES.get(a["outcome"], "failed"), f"restore {a['outcome']}: {a['message']}")
                      for a in restored["agents"]]


@audited("reconcile", agent=lambda bound: None, only_if="apply", each=_each_fixed)
def reconcile_document(app: App, apply: bool = False, adopt: bool = False, restore: bool = False) -> dict[str, Any]:
    """`restore`: after the fixes are on disk, `mam restore --all` (its agents and counts go under `restore`)."""
    explicit = resolve_explicit_backend(app)
    reg = app.load_registry()
    rows = [r for r in reg.rows if explicit is None or r.backend == explicit]
    outcomes = outcomes_for(app, {r.server_key for r in rows})
    unknown = {k for k, o in outcomes.items() if o.state is ServerState.UNKNOWN}
    confirmed_rows = [r for r in rows if r.server_key not in unknown]
    # Looked at after the listings: a spawn that held its row then and has ended since wrote its outcome first,
    # so the row no longer is what was read, and make_change leaves it alone.
    dot_mam = app.workspace.dot_mam
    in_flight = frozenset(r.key for r in confirmed_rows
                          if r.status == "starting" and inflight.in_flight(dot_mam, r.raw.get(inflight.TOKEN)))
    drifts = find_drifts(confirmed_rows, {k: o for k, o in outcomes.items() if k not in unknown}, adopt, in_flight)
    applied = False
    written: list[Drift] = []
    if apply:
        fixes = [d for d in drifts if d.cls in "ACD" or d.action == "adopt"]
        if fixes:
            key = _spec_key(app) if any(d.cls == "D" for d in fixes) else None
            ended = _ended(app, fixes, confirmed_rows, outcomes)
            app.update_registry(make_change(fixes, written, key, ended))
        applied = True
    alive = sorted(f"{a.name}|{server}" + (f"@{host}" if host else "") for (_, server, host), o in outcomes.items()
                   for a in o.agents if a.name is not None)
    return {
        "schema": 1,
        "workspace": str(app.workspace.root),
        "registry": str(reg.path),
        "backend": explicit,
        "confirmed": not unknown,
        "servers": [outcomes[k].as_json() for k in sorted(outcomes, key=listed_order)],
        "sessions_alive": alive,
        "unconfirmed": sorted(f"{r.name}|{r.server}" + (f"@{r.host}" if r.host else "") for r in rows
                              if r.server_key in unknown),
        "drifts": [d.as_json() for d in drifts],
        "applied": applied,  # --apply was given and its pass is on disk, even with nothing to write
        # rows --apply changed or added (a row both C and D counts once); fewer when rows changed meanwhile
        "written": len({d.key for d in written}),
        "restore": _restore_all(app) if restore else None,
    }


def _ended(app: App, fixes: list[Drift], rows: list[Row],
           outcomes: Mapping[ServerKey, ServerOutcome]) -> dict[RowKey, dict[str, Any]]:
    """How the agents of drift A rows on servers that answered ended: their exit status and last lines, read
    from the panes their backend keeps, for the row (before a restore closes those panes)."""
    gone = {d.key for d in fixes if d.cls == "A"}
    asked = [r for r in rows if r.key in gone and outcomes[r.server_key].state is ServerState.UP]
    if not asked:
        return {}
    from mam.agents.remains import read_remains, row_fields

    found = read_remains(app, asked)
    stamp = registry.timestamp()
    return {r.key: row_fields(app, r, found[r.key], stamp) for r in asked if r.key in found}


def _restore_all(app: App) -> dict[str, Any]:
    from mam.agents.restoreplan import plan_summary, restore_plan, run_plan

    steps, _ = restore_plan(app, [], all_rows=True)
    run_plan(app, steps)
    return {"agents": [s.as_json() for s in steps], "counts": plan_summary(steps)}
