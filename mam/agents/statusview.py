"""The status document (`mam status`, `mam wait`): every registry row in scope, next to what its server says now
(docs/json.md), and what a person must read first about it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mam.agents.rows import ending, fresh_ends, how_it_ended, session_entry
from mam.config.settings import timeout_from_env
from mam.plugin.records import AGENT_STATES, AgentState, ServerOutcome, ServerState
from mam.registry import Registry, Row, RowKey
from mam.servers.app import App
from mam.servers.availability import resolve_explicit_backend
from mam.servers.fanout import ServerKey, call_context, listed_order, outcomes_for
from mam.servers.hosts import checked_host, host_key
from mam.util.errors import MamError
from mam.util.names import check_name

# Deferred imports (inside functions), for start-up: agent state, its sources and the screen rules load only when
# states are asked for.

NO_STATE = {"state": None, "state_source": None, "evidence": None, "state_age": None}  # --no-state: not read


def add_state(entry: dict[str, Any], outcome: ServerOutcome | None, states: Mapping[str, AgentState]) -> None:
    """Add the agent's state to a status entry: what was read for it, or why nothing could be."""
    from mam.agents import agentstate as agent_state

    found = states.get(entry["name"])
    if found is None:
        found = {"alive": agent_state.unknown("its state was not read"), "absent": agent_state.NOT_RUNNING,
                 "unknown": agent_state.NOT_ASKED}[entry["live"]]
        if outcome is not None and outcome.state is ServerState.DOWN:
            found = agent_state.SERVER_DOWN
    entry.update(found.as_json())


def add_ends(app: App, entries: Sequence[tuple[Row, dict[str, Any], ServerOutcome | None]]) -> None:
    """Set how each entry's agent ended as soon as its backend can tell: an agent its server (up) no longer
    lists is asked of the backend, which may keep its ended pane (one question per server), before what the row
    recorded (`reconcile --apply`). Its end then explains it (evidence's fact: the table's WHY)."""
    asked = [row for row, entry, outcome in entries
             if entry["live"] == "absent" and outcome is not None and outcome.state is ServerState.UP]
    fresh = fresh_ends(app, asked) if asked else {}
    for row, entry, _ in entries:
        found = fresh.get(row.key)
        if found is not None:
            entry.update({k: found[k] for k in ("exit_status", "exit_signal", "last_output")})
        entry.update(ending(row.raw, entry["live"], found))
        evidence = entry.get("evidence")
        if entry["end"] not in (None, "lost") and isinstance(evidence, dict):
            how = how_it_ended(row, found)
            entry["evidence"] = {**evidence, "fact": entry["end"] + (f": {row.name} {how}" if how else "")}


def parse_state_filter(values: Sequence[str], option: str = "--state") -> frozenset[str]:
    """`--state blocked --state idle,done`: the states to show. An unknown word is bad input."""
    wanted = {word.strip() for value in values for word in value.split(",") if word.strip()}
    bad = sorted(wanted - set(AGENT_STATES))
    if bad or (values and not wanted):
        from mam.util.names import closest

        close = closest(bad[0], AGENT_STATES) if bad else None
        raise MamError("usage", f"{option} {','.join(bad) or '(empty)'}: expected one or more of "
                       f"{', '.join(AGENT_STATES)}, separated by commas",
                       hint=f"did you mean {option} {close}?" if close else None)
    return frozenset(wanted)


def status_document(app: App, servers: Sequence[str] = (), *, with_state: bool = True,
                    only_states: frozenset[str] = frozenset(), names: Sequence[str] = (),
                    host: str | None = None, registry: Registry | None = None) -> dict[str, Any]:
    """The status document. `with_state` reads each live agent's state in the same fan-out as the listing;
    `only_states` keeps the sessions in those states; `names` keeps those rows only (mam wait); `host` keeps
    the rows of that host (and asks `servers` there). `registry`: the workspace's registry as already read
    (mam top reads it once for all its servers' calls), else read here."""
    for server in servers:
        check_name(server, "server name")
    host = checked_host(host)
    explicit = resolve_explicit_backend(app)
    reg = registry if registry is not None else app.load_registry()
    rows = [r for r in reg.rows if explicit is None or r.backend == explicit]
    if servers:
        rows = [r for r in rows if r.server in servers]
    if names:
        rows = [r for r in rows if r.name in names]
    there = host_key(host)
    if host is not None:
        rows = [r for r in rows if (r.host or "") == there]
    # A server no row names is asked of the selected backend; one the rows name is theirs (without --backend,
    # `--server team` for tmux rows must not also ask herdr's "team").
    keys = {r.server_key for r in rows} | {(app.backend_name, s, there) for s in servers
                                           if explicit is not None or not any(r.server == s for r in rows)}
    reading = with_state or bool(only_states)
    worktrees: Callable[[], Mapping[RowKey, dict[str, Any]]] = dict
    if any(r.spec is not None and isinstance(r.spec.get("worktree"), dict) for r in rows):
        from mam.agents.worktrees import read_states  # start-up: git's modules only for rows with a worktree

        worktrees = read_states(app, rows)  # one `git status` per worktree, beside the servers' fan-out
    outcomes, states = observe(app, rows, keys, reading)
    work = worktrees()
    sessions = []
    seen = []
    for row in rows:
        key = row.server_key
        entry = session_entry(row, outcomes.get(key))
        if row.key in work:
            entry["worktree"] = work[row.key]
        if reading:
            add_state(entry, outcomes.get(key), states.get(key, {}))
        else:
            entry.update(NO_STATE)
        sessions.append(entry)
        seen.append((row, entry, outcomes.get(key)))
    add_ends(app, seen)
    sessions.sort(key=lambda s: (s["host"] or "", s["backend"], s["server"], s["name"]))
    if only_states:
        sessions = [s for s in sessions if s["state"] in only_states]
    return {
        "schema": 1,
        "workspace": str(app.workspace.root),
        "registry": str(reg.path),
        "backend": explicit,
        "servers": [outcomes[k].as_json() for k in sorted(outcomes, key=listed_order)],
        "sessions": sessions,
        "state_filter": sorted(only_states, key=AGENT_STATES.index) if only_states else None,
    }


def observe(app: App, rows: Sequence[Row], keys: set[ServerKey] | None = None, reading: bool = True,
            ) -> tuple[Mapping[ServerKey, ServerOutcome], dict[ServerKey, Mapping[str, AgentState]]]:
    """One listing of each server of `keys` (default: the rows' servers), all in one parallel fan-out, and when
    `reading`, the states of the rows' live agents read in the same fan-out (one capture call per server),
    however many of its agents the rows name."""
    keys = {r.server_key for r in rows} if keys is None else keys
    found: dict[ServerKey, Any] = {}
    reader = _state_reader(app, rows, found) if reading and rows else None
    outcomes = outcomes_for(app, keys, reader)
    for states in found.values():
        if isinstance(states, MamError):
            raise states
    if reader is None:
        return outcomes, {}
    return outcomes, reader.settle(found)  # the screens, read here: a bad .mam/states.yaml is bad input, exit 2


class _StateReader:
    """The fan-out's `after` step (the states of the live agents that have rows, one capture call per server),
    then `settle`: the captured screens read by the rules, in the calling thread, each within its time limit."""

    def __init__(self, after: Any, library: Any, budget: float, dot_mam: Any, fresh: float) -> None:
        self.after, self.library, self.budget = after, library, budget
        self.dot_mam, self.fresh = dot_mam, fresh
        self.panes: dict[ServerKey, dict[str, str | None]] = {}  # each live agent's pane id, from the listing

    def __call__(self, key: ServerKey, outcome: ServerOutcome) -> None:
        self.after(key, outcome)

    def settle(self, found: Mapping[ServerKey, Any]) -> dict[ServerKey, Mapping[str, AgentState]]:
        """The sources in their order (mam.agents.sources): the agents' own hook reports (of this machine's agents: a
        remote agent's report is on its host), then what the backend gave, its screens read here."""
        from mam.agents import agentstate as agent_state
        from mam.agents import sources

        def screen(item: Any) -> AgentState:
            return agent_state.read_capture(self.library(), item.kinds, item.capture, item.stale_after, self.budget)

        def kind(item: Any) -> str | None:
            return agent_state.kind_of(self.library(), item.kinds, item.capture.command)

        out: dict[ServerKey, Mapping[str, AgentState]] = {}
        with agent_state.screen_time_limits(found.values()):
            for key, states in found.items():
                reports = sources.reports(self.dot_mam, list(states)) if not key[2] else {}
                out[key] = sources.decide(states, self.panes.get(key, {}), reports, screen, kind, fresh=self.fresh)
        return out


def _state_reader(app: App, rows: Sequence[Row], into: dict[ServerKey, Any]) -> _StateReader:
    from mam.agents import agentstate as agent_state
    from mam.kinds.classify import SCREEN_TIMEOUT, SCREEN_TIMEOUT_VAR

    library = agent_state.LazyLibrary(app.workspace.dot_mam / "states.yaml")
    stale_after = timeout_from_env(app.env, "MAM_STALE_SECONDS", agent_state.STALE_AFTER)
    budget = timeout_from_env(app.env, SCREEN_TIMEOUT_VAR, SCREEN_TIMEOUT)
    ctx = call_context(app)
    kinds: dict[ServerKey, dict[str, str | None]] = {}
    for row in rows:
        kinds.setdefault(row.server_key, {})[row.name] = row.agent
    if any(_captures(app, backend) for backend in {b for b, _, _ in kinds}):
        library.prefetch()  # a backend that reads screens will need the rules: load them while servers answer

    def after(key: ServerKey, outcome: ServerOutcome) -> None:
        wanted = kinds.get(key, {})
        alive = tuple(a for a in outcome.agents if a.name is not None and a.name in wanted)
        if outcome.state is ServerState.UP and alive:
            reader.panes[key] = {a.name or "": a.pane_id for a in alive}
            into[key] = agent_state.safe_server_states(app.plugins, key[0], key[1], alive, wanted, ctx, stale_after)

    from mam.agents.sources import HOOK_FRESH

    fresh = timeout_from_env(app.env, "MAM_HOOK_FRESH", HOOK_FRESH)
    reader = _StateReader(after, library, budget, app.workspace.dot_mam, fresh)
    return reader


def _captures(app: App, backend: str) -> bool:
    try:
        return hasattr(app.plugins.backend(backend), "capture_panes")
    except MamError:
        return False


def unanswered(app: App, doc: Mapping[str, Any]) -> tuple[list[str], bool]:
    """What a person must read first about a status or reconcile document: the servers that could not be asked
    and why, and whether a backend's binary is missing (then the command exits 3, the document still whole)."""
    notes: list[str] = []
    missing: dict[str, str] = {}
    unknown = [s for s in doc["servers"] if s["state"] == "unknown"]
    for server in unknown:
        error = server["error"] or {}
        if error.get("kind") == "not_installed":
            missing.setdefault(server["backend"], error.get("message", ""))
    explicit = doc.get("backend")
    # A server of it that was asked has already shown whether its binary runs: look it up only when none was.
    if explicit is not None and all(s["backend"] != explicit for s in doc["servers"]):
        spec = app.plugins.spec(explicit)
        import shutil

        if spec.executable and shutil.which(spec.executable, path=app.backend_env.get("PATH")) is None:
            missing[explicit] = f"{spec.executable}: not found on PATH"
    if unknown:
        # The kinds, not the messages: those quote the backend's own output, which is shown in the table.
        kinds = sorted({str((s["error"] or {}).get("kind", "unknown")).replace("_", " ") for s in unknown})
        names = [f"{s['backend']} {s['server']}" for s in unknown]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        notes.append(f"{len(unknown)} server{'s' if len(unknown) != 1 else ''} could not be asked ({', '.join(kinds)}"
                     f"), so their agents are unconfirmed: {shown}")
    # A backend that rows are on is theirs: another one would not reach their agents, so only the one chosen
    # (explicitly or by default) for a workspace without such rows gets "pick another".
    rowed = {s["backend"] for s in doc.get("sessions", ())}
    for backend, message in sorted(missing.items()):
        from mam.servers.availability import missing_binary_hint

        try:
            hint = missing_binary_hint(app, backend, of_row=backend in rowed or backend != app.backend_name)
        except MamError:  # the backend's plugin itself is missing
            hint = f"install the plugin of backend {backend}, or choose another backend with --backend"
        notes.append(f"{message}: {hint}")
    return notes, bool(missing)
