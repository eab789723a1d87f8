"""What an ended agent left: its exit status and the last lines its pane showed, read from the backend (the
`mam_agent_remains` hook) before anything closes the pane, and written into its row (docs/registry.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mam.plugin.records import Failure, Remains
from mam.registry import Row, RowKey

if TYPE_CHECKING:
    from mam.servers.app import App

# Deferred imports (inside functions), for start-up: the fan-out's call context and the route load only when a backend
# is asked.

LINE_CHARS = 200  # a kept line is cut to this: pane text is anyone's
KEPT_LINES = 20  # the last lines of an ended pane a row keeps
FIELDS = ("exit_status", "exit_signal", "last_output", "ended_at")
# How an agent ended (docs/states.md), null while it runs or when its server could not be asked: finished (its
# program exited 0), failed (a non-zero status), killed (a signal), stopped (by `mam stop`), lost (gone and no
# one kept how: its server died with it, or lists it no more and keeps no ended pane of it).
ENDS = ("finished", "failed", "killed", "stopped", "lost")
# The ends its program's exit tells (a pane the backend keeps, or the row's record of it): status, wait and top
# say them as facts; `stopped` and `lost` are mam's own words for the others.
EXIT_ENDS = ("finished", "failed", "killed")
# The ends `restore --all` and `reconcile --apply --restore` start again: never what ended well or was stopped.
RESTARTED_ENDS = ("failed", "killed", "lost")


def state_or_done(entry: Mapping[str, Any]) -> Any:
    """A status entry's state as `mam wait --until done` and a watch of `done` take it: `done` for an agent whose
    program finished (exited 0), its work over as a turn's is, whatever its gone screen reads."""
    return "done" if entry.get("end") == "finished" else entry.get("state")


def read_remains(app: App, rows: Iterable[Row]) -> dict[RowKey, Remains]:
    """The remains of each of `rows` whose backend still keeps its ended pane, asked once per server. A server
    that cannot be asked, or a backend that keeps nothing, leaves its rows out: nothing is known of them."""
    from mam.calls.route import remote_route
    from mam.plugin.records import CallContext
    from mam.servers.fanout import call_context

    by_server: dict[tuple[str, str, str], list[Row]] = {}
    for row in rows:
        by_server.setdefault(row.server_key, []).append(row)
    found: dict[RowKey, Remains] = {}
    ctx: CallContext | None = None
    for (backend_name, server, host), of_server in sorted(by_server.items()):
        try:
            ctx = ctx or call_context(app)
            backend = app.plugins.backend(backend_name)
            with remote_route(app.route(host)):
                answer = app.plugins.agent_remains(backend, server, tuple(r.name for r in of_server), ctx)
        except Exception:  # a plugin bug, an unusable host: nothing is known, and nothing else is spoilt
            continue
        if answer is None or isinstance(answer, Failure):
            continue
        for row in of_server:
            remains = answer.get(row.name)
            if isinstance(remains, Remains):
                found[row.key] = remains
    return found


def shown_line(line: str, assignments: Sequence[str] = ()) -> str:
    """`line` as a row keeps it: cleaned as every quoted line is (mam.kinds.classify.clean: no control, format or
    invisible character), its secret values hidden and only then cut to LINE_CHARS (a cut first could leave a
    piece of a value too short for hide_values to know it)."""
    from mam.kinds.classify import clean
    from mam.util.masking import hide_values

    text = hide_values(clean(line), assignments).rstrip()
    return text if len(text) <= LINE_CHARS else text[:LINE_CHARS - 3] + "..."


def row_fields(app: App, row: Row, remains: Remains, now: str) -> dict[str, Any]:
    """The row's fields for `remains`: the values of the row's `--env` variables (as set now) are hidden in its
    lines, as in every message about it (the registry keeps names only)."""
    names = (row.spec or {}).get("env_names") or ()
    assignments = [f"{name}={app.env[name]}" for name in names if name in app.env]
    lines = [shown_line(line, assignments) for line in remains.lines if isinstance(line, str)]
    # What a plugin hands back is checked as the registry checks it: a bad value must not void the write.
    return {"exit_status": _count(remains.exit_status), "exit_signal": _count(remains.exit_signal),
            "last_output": [line for line in lines if line.strip()][-KEPT_LINES:],
            "ended_at": _when(remains.ended_at) or now}


def _when(epoch: object) -> str | None:
    """The backend's time of the end (seconds since the epoch) as the registry writes times; None when unusable."""
    from datetime import UTC, datetime

    if not isinstance(epoch, int | float) or isinstance(epoch, bool) or not 0 < epoch < 32503680000:
        return None
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def current_end(raw: Mapping[str, Any]) -> bool:
    """Whether the row's recorded end is of its agent's last run: at or after its last restore, if any (the
    backend's time of an end has whole seconds, as the registry's times)."""
    ended_at, restored_at = raw.get("ended_at"), raw.get("restored_at")
    return restored_at is None or (isinstance(ended_at, str) and ended_at >= str(restored_at))


def recorded_end(raw: Mapping[str, Any]) -> bool:
    """Whether the row already records how its agent's last run ended (reconcile or restore wrote it, its
    `--env` values hidden as they were then): its backend need not be asked again."""
    known = any(isinstance(raw.get(k), int) for k in ("exit_status", "exit_signal"))
    return known and current_end(raw)


def end_of(raw: Mapping[str, Any], live: str, fresh: Mapping[str, Any] | None = None) -> tuple[str | None, str | None]:
    """How the row's agent ended (one of ENDS) and when (a registry time, or None when unknown); (None, None)
    while it runs (`live` is `alive`) or when its server could not be asked and the row knows nothing. `fresh`:
    the row fields (`row_fields`) of what its backend keeps of it now, which come before what the row recorded."""
    if live == "alive":
        return None, None
    stop = raw.get("stop_requested_at")
    if stop is not None or raw.get("status") == "stopped":
        return "stopped", stop if isinstance(stop, str) else _str(raw.get("ended_at"))
    facts = fresh if fresh else (raw if current_end(raw) else {})
    status, signal = facts.get("exit_status"), facts.get("exit_signal")
    when = _str(facts.get("ended_at"))
    if isinstance(status, int) and not isinstance(status, bool):
        return ("finished" if status == 0 else "failed"), when
    if isinstance(signal, int) and not isinstance(signal, bool):
        return "killed", when
    if raw.get("spawn_failed") is True:
        return "failed", when
    if live == "unknown" and raw.get("status") != "terminated":
        return None, None
    return "lost", None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def how_it_ended(raw: Mapping[str, Any]) -> str:
    """`exited with status 1`, `was killed by signal 9`, or "" when the row does not know."""
    status, signal = raw.get("exit_status"), raw.get("exit_signal")
    if isinstance(status, int):
        return f"exited with status {status}"
    return f"was killed by signal {signal}" if isinstance(signal, int) else ""


def last_line(raw: Mapping[str, Any]) -> str:
    lines = raw.get("last_output")
    return lines[-1] if isinstance(lines, list) and lines and isinstance(lines[-1], str) else ""
