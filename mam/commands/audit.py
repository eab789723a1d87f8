"""`mam audit`: the lines of the workspace's audit trail (mam.audit.trail), newest last, filtered."""

from __future__ import annotations

import re
import time
from typing import Any

from mam.audit.trail import read
from mam.servers.app import App
from mam.util.errors import MamError

_AGO = re.compile(r"(\d+)([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def since_of(text: str | None, now: float | None = None) -> float | None:
    """--since: an age (`90s`, `30m`, `2h`, `7d`) or a UTC date and time (`2026-12-06`, `2026-12-06T13:00:00`,
    a trailing Z allowed); the epoch seconds it names."""
    if text is None:
        return None
    now = time.time() if now is None else now
    ago = _AGO.fullmatch(text.strip())
    if ago:
        return now - int(ago.group(1)) * _UNIT[ago.group(2)]
    import calendar

    for form in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"):
        try:
            return float(calendar.timegm(time.strptime(text.strip().removesuffix("Z"), form)))
        except ValueError:
            continue
    raise MamError("usage", f"--since {text!r}: neither an age nor a UTC date",
                   hint="e.g. --since 2h, --since 7d or --since 2026-12-06T13:00")


def audit_document(app: App, since: str | None = None, agent: str | None = None,
                   limit: int | None = None) -> dict[str, Any]:
    if limit is not None and limit < 1:
        raise MamError("usage", f"--limit {limit}: at least 1")
    start = since_of(since)
    lines, skipped = read(app.workspace.dot_mam)
    chosen = [e for e in lines if (start is None or _time(e) >= start)
              and (agent is None or agent in str(e.get("agent") or "").split(","))]
    if limit is not None:
        chosen = chosen[-limit:]
    return {"schema": 1, "file": str(app.workspace.dot_mam / "audit.jsonl"), "entries": chosen, "skipped": skipped}


def _time(entry: dict[str, Any]) -> float:
    value = entry.get("time")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0
