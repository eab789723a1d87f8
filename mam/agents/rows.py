"""Finding the rows a command means, their live view (what their server lists), and writing only to rows nobody
changed since they were read."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mam.plugin.records import Agent, ServerOutcome, ServerState
from mam.registry import Registry, Row, RowKey, timestamp
from mam.servers.availability import require_binary, resolve_explicit_backend
from mam.servers.hosts import checked_host, host_key
from mam.util.errors import MamError
from mam.util.names import check_name
from mam.util.quote import shown

if TYPE_CHECKING:
    from mam.servers.app import App

# Deferred imports (inside functions), for start-up: `mam status` reads rows on every run; the remains load on the
# error path.


def rows_on(app: App, reg: Registry, server: str | None, host: str | None = None) -> list[Row]:
    """The rows of the backend chosen explicitly (--backend, $MAM_BACKEND), else of any backend, since the row
    itself says which; on `server` when given; on `host` (checked; "local" is this machine) when given."""
    explicit = app.explicit_backend
    there = None if host is None else host_key(host)
    return [r for r in reg.rows if (explicit is None or r.backend == explicit)
            and (server is None or r.server == server) and (there is None or (r.host or "") == there)]


def rows_named(app: App, reg: Registry, name: str, server: str | None, host: str | None = None) -> list[Row]:
    """The rows a command about agent `name` means (`rows_on` with that name). More than one is refused,
    saying what to add."""
    rows = [r for r in rows_on(app, reg, server, host) if r.name == name]
    if len(rows) > 1:
        where = ", ".join(sorted(f"{r.backend} server {r.server}" + (f" on {r.host}" if r.host else "") for r in rows))
        # Only what tells them apart: a name on one server name of two hosts needs --host, not --server.
        needed = [option for option, values in (("--backend NAME", {r.backend for r in rows}),
                                                ("--server NAME", {r.server for r in rows}),
                                                ("--host HOST", {r.host or "" for r in rows})) if len(values) > 1]
        raise MamError("usage", f"{name} is registered on several servers ({where})",
                       hint="pass " + " and ".join(needed))
    return rows


def agent_row(app: App, name: str, server: str | None = None, host: str | None = None) -> Row:
    """The one registry row of agent `name` (of the explicit backend, `server` and `host` when given)."""
    check_name(name, "agent name")
    if server is not None:
        check_name(server, "server name")
    resolve_explicit_backend(app)  # an unknown --backend is refused before the registry is read
    rows = rows_named(app, app.load_registry(), name, server, checked_host(host))
    if not rows:
        raise MamError("operation_failed", f"no registered agent named {name}"
                       + (f" on server {server}" if server else ""), hint="see `mam status`")
    return rows[0]


def snapshot(row: Row) -> dict[str, Any]:
    """The row as it was read, for `unchanged_rows` to compare the re-read registry against."""
    return copy.deepcopy(row.raw)


def unchanged_rows(rows: tuple[Row, ...], seen: Mapping[RowKey, Mapping[str, Any]]) -> list[Row]:
    """Those of the freshly re-read `rows` (under the registry lock) that are still exactly as `seen` (their
    snapshots, by key): a row another command rewrote meanwhile (a re-spawn, a stop, a reconcile, a hand edit)
    is theirs, and a write planned on the old one leaves it alone."""
    return [row for row in rows if row.key in seen and row.raw == seen[row.key]]


def live_agent(row: Row, outcome: ServerOutcome | None) -> tuple[str, Agent | None]:
    """`alive` with the listed agent, `absent` (up without it, or down), or `unknown`."""
    if outcome is None or outcome.state is ServerState.UNKNOWN:
        return "unknown", None
    for agent in outcome.agents:
        if agent.name == row.name:
            return "alive", agent
    return "absent", None


def listed_agent(app: App, row: Row, outcome: ServerOutcome, verb: str) -> Agent:
    """The agent `outcome` lists for `row`, for a command that acts on a running agent (`verb`: `mam peek`,
    `mam send`, `mam attach`); an error when its server is down (never started here), could not be asked, or
    does not list it: then how the row says its agent ended, and how to bring it back (`not_running`)."""

    if outcome.state is ServerState.DOWN:
        raise not_running(row, f"{row.backend} server {row.server} is down; {verb} never starts it")
    if outcome.state is ServerState.UNKNOWN:
        require_binary(app, outcome.error.kind if outcome.error else None, f"{verb} needs it", row.backend,
                       of_row=True)
        why = outcome.error.message if outcome.error else "no answer"
        raise MamError("operation_failed", f"{row.backend} server {row.server} could not be asked: {why}")
    agent = next((a for a in outcome.agents if a.name == row.name), None)
    if agent is None:
        raise not_running(row, f"{row.name} is not running on {row.backend} server {row.server}",
                          fresh_ends(app, [row]).get(row.key))
    return agent


def fresh_ends(app: App, rows: list[Row]) -> dict[RowKey, dict[str, Any]]:
    """What the backends keep now of the ended agents of `rows` (their servers up, the agents not listed), as row
    fields (mam.agents.remains.row_fields): one question per server. A row that already records its agent's end
    is not asked about: that end is the same, and was written with the values of its `--env` variables hidden,
    which this command may not know."""
    from mam.agents import remains

    rows = [row for row in rows if not remains.recorded_end(row.raw)]
    if not rows:
        return {}
    now = timestamp()
    by_row = {row.key: row for row in rows}
    return {key: remains.row_fields(app, by_row[key], found, now)
            for key, found in remains.read_remains(app, rows).items() if key in by_row}


def not_running(row: Row, message: str, fresh: Mapping[str, Any] | None = None) -> MamError:
    """The error about agent `row` that is not running (`message` says why: its server is down, or lists it
    not): with how it ended, when that is known (`fresh`: what its backend keeps of it now, else its row), and
    how to bring it back."""
    ended = how_it_ended(row, fresh)
    return MamError("operation_failed", message + (f"; {row.name} {ended}" if ended else ""), hint=bring_back(row))


def how_it_ended(row: Row, fresh: Mapping[str, Any] | None = None) -> str:
    """How the agent of `row` last ended, for a message (`exited with status 1; its last output: 'Error: no API
    key'`, its last two lines at most, quoted and cut short: pane text is anyone's; `was stopped by mam stop`);
    from `fresh` (what its backend keeps of it now) when given, else from the row; "" when neither knows, or the
    row knows only an end from before its last restore (the agent has run since)."""
    from mam.agents import remains

    raw = row.raw
    if not fresh and remains.end_of(raw, "absent")[0] == "stopped":
        return "was stopped by `mam stop`"
    facts = fresh or (raw if remains.current_end(raw) else None)
    if not facts:
        return ""
    how = remains.how_it_ended(facts)
    lines = [line for line in _cleaned(facts.get("last_output")) if line.strip()][-2:]
    said = ", ".join(shown(line.strip(), 100, quote="repr", cut="inside") for line in lines)
    return "; ".join(part for part in (how, f"its last output: {said}" if said else "") if part)


def row_spec(row: Row) -> dict[str, Any] | None:
    """The row's launch spec; a row written before mam kept one is restorable when its agent kind and
    directory are enough to start it."""
    if row.spec is not None and (row.spec.get("kind") or row.spec.get("command")) and row.spec.get("cwd"):
        return row.spec
    from mam.kinds.library import agent_programs  # start-up: `mam status` never loads the kind library for rows

    if row.spec is None and row.agent in agent_programs() and row.cwd:
        return {"kind": row.agent, "args": [], "cwd": row.cwd, "env_names": []}
    return None


def bring_back(row: Row) -> str:
    """What to do about an agent that is not running: start it again where it was (its server with it)."""
    if row_spec(row) is None:  # adopted, or written by hand: restore has nothing to start it from
        return (f"`mam --backend {row.backend} spawn {row.name} --server {row.server} ...` starts it again (its "
                "row keeps no launch spec for `mam restore`)")
    return f"`mam restore {row.name}` starts it again from its launch spec (`--dry-run` shows how)"


def session_entry(row: Row, outcome: ServerOutcome | None) -> dict[str, Any]:
    live, agent = live_agent(row, outcome)
    return {
        "name": row.name, "backend": row.backend, "server": row.server, "host": row.host, "status": row.status,
        "live": live,
        "agent": (agent.agent if agent and agent.agent else row.agent),
        "cwd": (agent.cwd if agent and agent.cwd else row.cwd),
        "pane_id": (agent.pane_id if agent and agent.pane_id else row.pane_id),
        **history(row.raw),
        **ending(row.raw, live),
    }


def ending(raw: Mapping[str, Any], live: str, fresh: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A status entry's `end` and `ended_at` (mam.agents.remains.end_of)."""
    from mam.agents.remains import end_of

    end, ended_at = end_of(raw, live, fresh)
    return {"end": end, "ended_at": ended_at}


def history(raw: Mapping[str, Any]) -> dict[str, Any]:
    """What the row keeps of its restores and of how its agent last ended (docs/registry.md); the registry has
    checked each field's type when it was read. The last lines are cleaned as every quoted line is: a row is
    anyone's text (a clone's registry), not only what mam wrote there."""
    lines = raw.get("last_output")
    return {"restore_count": raw.get("restore_count") or 0, "restored_at": raw.get("restored_at"),
            "crash_loop": "crash_loop_at" in raw, "exit_status": raw.get("exit_status"),
            "exit_signal": raw.get("exit_signal"), "last_output": _cleaned(lines) if lines else []}


def _cleaned(lines: object) -> list[str]:
    from mam.kinds.classify import clean

    return [clean(line) for line in lines if isinstance(line, str)] if isinstance(lines, list) else []
