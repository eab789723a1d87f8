"""What `mam stop` writes to a row around the close (mam/commands/lifecycle.py closes): the stop is recorded in
the row before anything is closed, so that an agent mam closed is never started again by `restore --all`, even
when its row cannot be written afterwards (a full disk)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from mam import registry
from mam.registry import Row, RowKey
from mam.servers.app import App
from mam.util.errors import MamError

# The row field that records a stop asked for: `restore --all` passes such a row over; a start of it drops it.
STOP_REQUESTED = "stop_requested_at"


class LeftRunning(MamError):
    """The agent's pane or session is there, but mam did not make it: nothing was closed, its row is as it was."""


def _rewrite(app: App, key: RowKey, before: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> bool:
    """Apply `edit` to the row of `key` under the registry lock, only while it is exactly `before`: a row another
    command rewrote meanwhile (a re-spawn, a reconcile) is theirs. True when it was written."""
    written: list[bool] = []

    def change(document: dict[str, Any], rows: tuple[Row, ...]) -> bool:
        for row in rows:
            if row.key == key and row.raw == before:
                edit(row.raw)
                written.append(True)
        return bool(written)

    registry.update(app.workspace.registry_path, app.row_default_backend, change)
    return bool(written)


def record_intent(app: App, row: Row, where: str) -> dict[str, Any]:
    """Write `stop_requested_at` to `row` before its agent is closed, and return the row as it is now. A write
    that fails closes nothing: the error says the agent was left as it was."""
    now = copy.deepcopy(row.raw)
    now[STOP_REQUESTED] = registry.timestamp()
    try:
        written = _rewrite(app, row.key, row.raw, lambda raw: raw.update({STOP_REQUESTED: now[STOP_REQUESTED]}))
    except MamError as exc:
        raise MamError(exc.code, f"{row.name} on {where} was not stopped: mam could not record the stop in its "
                                 f"registry row first ({exc.message}), so it closed nothing", hint=exc.hint) from None
    if not written:
        raise MamError("operation_failed", f"{row.name} on {where} was not stopped: another command changed its "
                                           "registry row meanwhile", hint="`mam status` shows what it says now")
    return now


def drop_intent(app: App, key: RowKey, seen: dict[str, Any]) -> None:
    """Take the recorded stop back when nothing was closed (the backend failed, or the agent is not mam's), so
    that the row says what it said before. Best effort: the error being reported matters more."""
    try:
        _rewrite(app, key, seen, lambda raw: raw.pop(STOP_REQUESTED, None))
    except MamError:
        pass


def record_outcome(app: App, key: RowKey, seen: dict[str, Any], fields: dict[str, Any], name: str,
                   what: str) -> None:
    """Write the stop's outcome to the row it recorded its intent in. `what` says what the backend did, for a
    message that never hides that the agent is stopped when the row cannot be written."""
    try:
        written = _rewrite(app, key, seen, lambda raw: raw.update(fields))
    except MamError as exc:
        status = seen.get("status") or "no status"
        raise MamError(exc.code, f"{what}; but mam could not write that to its registry row ({exc.message}): the "
                                 f"row still says {status}, with this stop recorded ({STOP_REQUESTED}), so "
                                 "`restore --all` does not start it again",
                       hint=f"once the registry can be written, `mam stop {name}` (or `mam reconcile --apply`) "
                            "records it") from None
    if not written:
        raise MamError("operation_failed", f"{what}, but another command changed its registry row meanwhile; mam "
                                           "left that row as it is", hint="`mam status` shows what it says now")
