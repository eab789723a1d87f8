"""When an automatic restore (`restore --all`, `reconcile --apply --restore`) starts a row's agent again: after a
delay that doubles with each restore of the last window, and never once it was restored LIMIT times in that
window (a crash loop). `mam restore NAME` by hand is never held back, and starts the count again
(docs/cli.md#mam-restore)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mam.util.errors import MamError

KEPT_TIMES = 50  # restore_times keeps this many, newest last: more than any limit that makes sense


@dataclass(frozen=True)
class Policy:
    backoff: float  # seconds before the first restore after a restore; doubled for each restore since
    limit: int  # restores in `window` that make a crash loop
    window: float  # seconds


def _number(env: Mapping[str, str], var: str, default: float, low: float, high: float, whole: bool = False) -> float:
    raw = env.get(var)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        kind = "a whole number" if whole else "a number of seconds"
        raise MamError("usage", f"${var}={raw}: expected {kind}, from {low:g} to {high:g}")
    return value


def policy(env: Mapping[str, str]) -> Policy:
    """$MAM_RESTORE_BACKOFF (default 10 s), $MAM_RESTORE_LIMIT (default 5), $MAM_RESTORE_WINDOW (default 600 s)."""
    return Policy(_number(env, "MAM_RESTORE_BACKOFF", 10.0, 0, 86400),
                  int(_number(env, "MAM_RESTORE_LIMIT", 5, 1, KEPT_TIMES, whole=True)),
                  _number(env, "MAM_RESTORE_WINDOW", 600.0, 1, 7 * 86400))


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def recent(raw: Mapping[str, Any], rules: Policy, now: float) -> list[float]:
    """The times of the row's automatic restores within the window, oldest first."""
    times = [_epoch(t) for t in raw.get("restore_times") or ()]
    return sorted(t for t in times if t is not None and now - rules.window <= t <= now + 1)


def held_back(raw: Mapping[str, Any], rules: Policy, now: float) -> tuple[str, str] | None:
    """("crash_loop", why) or ("backoff", why) when an automatic restore must not start the row now; else None."""
    times = recent(raw, rules, now)
    if not times:
        return None
    window = f"{rules.window:g} s"
    if len(times) >= rules.limit:
        return "crash_loop", f"crash loop: restored {len(times)} times within {window}, so not again"
    delay = min(rules.backoff * 2 ** (len(times) - 1), rules.window)
    wait = times[-1] + delay - now
    if wait > 0:
        return "backoff", (f"backing off: restored {len(times)} time{'s' if len(times) > 1 else ''} within "
                           f"{window}; the next restore waits {delay:g} s after the last ({wait:.0f} s more)")
    return None


def counted(raw: Mapping[str, Any], stamp: str) -> dict[str, Any]:
    """The fields an automatic restore writes as it claims the row: one more restore, at `stamp`."""
    count = raw.get("restore_count")
    times = [t for t in raw.get("restore_times") or () if isinstance(t, str)]
    return {"restore_count": (count if isinstance(count, int) and count >= 0 else 0) + 1,
            "restore_times": [*times, stamp][-KEPT_TIMES:]}


RESET = ("restore_count", "restore_times", "crash_loop_at")  # a restore by hand, or a new spawn, drops them
