"""`mam status`: every registry row in scope, next to what its server says now (contract 4.2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mam.app import App
from mam.model import Agent, CallContext, ServerOutcome, ServerState
from mam.names import check_name
from mam.query import ServerKey, query_servers
from mam.registry import Row


def live_agent(row: Row, outcome: ServerOutcome | None) -> tuple[str, Agent | None]:
    """`alive` with the listed agent, `absent` (up without it, or down), or `unknown`."""
    if outcome is None or outcome.state is ServerState.UNKNOWN:
        return "unknown", None
    for agent in outcome.agents:
        if agent.name == row.name:
            return "alive", agent
    return "absent", None


def session_entry(row: Row, outcome: ServerOutcome | None) -> dict[str, Any]:
    live, agent = live_agent(row, outcome)
    return {
        "name": row.name, "backend": row.backend, "server": row.server, "status": row.status, "live": live,
        "agent": (agent.agent if agent and agent.agent else row.agent),
        "cwd": (agent.cwd if agent and agent.cwd else row.cwd),
        "pane_id": (agent.pane_id if agent and agent.pane_id else row.pane_id),
    }


def resolve_explicit_backend(app: App) -> str | None:
    """An explicitly selected backend must exist and load (exit 3 or 4); its binary may still be missing."""
    explicit = app.explicit_backend
    if explicit is not None:
        app.plugins.backend(explicit)
    return explicit


def call_context(app: App) -> CallContext:
    return CallContext(timeout=app.timeout, env=app.backend_env)


def outcomes_for(app: App, keys: set[ServerKey]) -> Mapping[ServerKey, ServerOutcome]:
    return query_servers(app.plugins, keys, call_context(app)) if keys else {}


def status_document(app: App, servers: Sequence[str] = ()) -> dict[str, Any]:
    for server in servers:
        check_name(server, "server name")
    explicit = resolve_explicit_backend(app)
    reg = app.load_registry()
    rows = [r for r in reg.rows if explicit is None or r.backend == explicit]
    if servers:
        rows = [r for r in rows if r.server in servers]
    keys = {(r.backend, r.server) for r in rows} | {(app.backend_name, s) for s in servers}
    outcomes = outcomes_for(app, keys)
    sessions = sorted((session_entry(r, outcomes.get((r.backend, r.server))) for r in rows),
                      key=lambda s: (s["backend"], s["server"], s["name"]))
    return {
        "schema": 1,
        "workspace": str(app.workspace.root),
        "registry": str(reg.path),
        "backend": explicit,
        "servers": [outcomes[k].as_json() for k in sorted(outcomes)],
        "sessions": sessions,
    }
