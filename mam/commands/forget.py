"""`mam forget` and `mam prune`: take rows out of the registry, under its lock, atomically.

Only rows that are not active go without asking: forgetting a `starting`/`running` row would leave a live
agent that nobody tracks, so that takes `--force`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from mam.agents.rows import rows_named, snapshot, unchanged_rows
from mam.audit.trail import Entry, audited
from mam.registry import ACTIVE_STATUSES, Row
from mam.servers.app import App
from mam.util.errors import MamError
from mam.util.names import check_name, closest
from mam.util.quote import shown

# Deferred imports (inside functions), for start-up: the quoting helper loads only for a message.

PRUNABLE = ("terminated", "stopped")
# When a row last changed, newest first: a row is as old as the last thing that happened to it.
_TIMES = ("terminated_at", "stopped_at", "adopted_at", "created_at")


def _entry(row: Row) -> dict[str, Any]:
    return {"name": row.name, "backend": row.backend, "server": row.server, "host": row.host, "status": row.status}


def _remove(rows: Sequence[Row], dry_run: bool, app: App) -> dict[str, Any]:
    """Drop exactly these rows, if each is still the row that was chosen (same mapping) under the lock."""
    seen = {row.key: snapshot(row) for row in rows}
    removed: list[dict[str, Any]] = []

    def change(document: dict[str, Any], fresh: tuple[Row, ...]) -> bool:
        for row in unchanged_rows(fresh, seen):  # a row another writer changed since it was chosen stays
            document[row.list_key] = [r for r in document[row.list_key] if r is not row.raw]
            removed.append(_entry(row))
        return bool(removed)

    path = app.workspace.registry_path
    if dry_run:
        removed = [_entry(row) for row in rows]
    elif rows:
        app.update_registry(change)
    return {"schema": 1, "registry": str(path), "dry_run": dry_run,
            "removed": sorted(removed, key=lambda e: (e["backend"], e["server"], e["name"]))}


def _each_removed(doc: dict[str, Any]) -> list[Entry]:
    """The audit trail's line per row removed."""
    return [(r["name"], "ok", f"removed from {r['backend']} server {r['server']}") for r in doc["removed"]]


@audited("forget", agent=lambda bound: ",".join(bound["names"]) or None, unless="dry_run", each=_each_removed)
def forget_document(app: App, names: Sequence[str], server: str | None, *, force: bool = False,
                    dry_run: bool = False) -> dict[str, Any]:
    for name in names:
        check_name(name, "agent name")
    if server is not None:
        check_name(server, "server name")
    reg = app.load_registry()
    chosen: list[Row] = []
    for name in names:
        rows = rows_named(app, reg, name, server)
        if not rows:
            where = f" on server {server}" if server else ""
            which = f" of backend {app.explicit_backend}" if app.explicit_backend else ""
            raise MamError("operation_failed", f"no agent {name}{which}{where} in {reg.path}",
                           hint="see `mam status` for what is registered")
        row = rows[0]
        if row.active and not force:
            raise MamError("operation_failed", f"{name} is registered {row.status}: it may still be running; "
                           "forget closes nothing and left it as it was",
                           hint=f"`mam --backend {row.backend} stop {name} --server {row.server}` it first, or "
                                "pass --force to forget the row and leave whatever runs")
        chosen.extend(rows)
    return _remove(chosen, dry_run, app)


def _age_check(older_than: float | None) -> Callable[[Row], bool]:
    if older_than is None:
        return lambda row: True
    cutoff = datetime.now(UTC) - timedelta(days=older_than)

    def old_enough(row: Row) -> bool:
        for key in _TIMES:
            value = row.raw.get(key)
            if isinstance(value, str):
                try:
                    when = datetime.fromisoformat(value)
                except ValueError:
                    return False  # a time mam cannot read is no proof of age
                return (when if when.tzinfo else when.replace(tzinfo=UTC)) < cutoff
        return False  # no time at all: its age is unknown, keep it

    return old_enough


def parse_days(text: str | None) -> float | None:
    """`--older-than DAYS` as a number of days (`7`, `0.5`); anything else (`1d`, `nan`) is bad input, said in
    mam's words rather than the option parser's."""
    if text is None:
        return None

    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not 0 <= days < 100_000:  # also refuses nan and inf
        raise MamError("usage", f"--older-than {shown(text)}: expected a number of days, e.g. 7 or 0.5")
    return days


@audited("prune", agent=lambda bound: None, unless="dry_run", each=_each_removed)
def prune_document(app: App, statuses: Sequence[str] = PRUNABLE, older_than: float | None = None, *,
                   dry_run: bool = False) -> dict[str, Any]:
    wrong = sorted(set(statuses) & ACTIVE_STATUSES)
    if wrong:
        raise MamError("usage", f"--status {','.join(wrong)}: prune never removes active rows",
                       hint="`mam stop` them, or `mam forget NAME --force`")
    if older_than is not None and not (0 <= older_than < 100_000):
        raise MamError("usage", f"--older-than {older_than:g}: expected a number of days")
    explicit = app.explicit_backend
    old_enough = _age_check(older_than)
    registry_rows = app.load_registry().rows
    _refuse_unheard_of(statuses, {r.status for r in registry_rows if r.status})
    rows = [r for r in registry_rows if r.status in statuses and old_enough(r)
            and (explicit is None or r.backend == explicit)]
    return _remove(rows, dry_run, app)


def _refuse_unheard_of(statuses: Sequence[str], held: set[str]) -> None:
    """A status that is neither mam's own nor held by any row is a typo (`termintaed` would remove nothing and
    say so as if all were well). Any other word a row carries (a hand edit) may be pruned."""
    known = sorted((set(PRUNABLE) | held) - ACTIVE_STATUSES)
    for status in statuses:
        if status not in known:

            close = closest(status, known)
            # The registry's own words, a hand edit's included: a few, each cut short.
            some = ", ".join(k if len(k) <= 30 else k[:27] + "..." for k in known[:10])
            raise MamError("usage", f"--status {shown(status)}: no row has that status",
                           hint=f"did you mean {shown(close)}?" if close else
                           f"statuses here: {some}" + (", ..." if len(known) > 10 else ""))
