"""What an ended agent left: its exit status and the last lines its pane showed, read from the backend (the
`mam_agent_remains` hook) before anything closes the pane, and written into its row (docs/registry.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


def _shown_line(line: str, assignments: list[str]) -> str:
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
    lines = [_shown_line(line, assignments) for line in remains.lines if isinstance(line, str)]
    # What a plugin hands back is checked as the registry checks it: a bad value must not void the write.
    return {"exit_status": _count(remains.exit_status), "exit_signal": _count(remains.exit_signal),
            "last_output": [line for line in lines if line.strip()][-KEPT_LINES:], "ended_at": now}


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
