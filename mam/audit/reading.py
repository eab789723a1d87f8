"""`mam audit`: the trail's lines back (the rotated files, oldest first, then the current one), filtered by time
and agent, as a JSON document (mam/schemas/audit.json) or a table. A line that is not one of the trail's (torn,
foreign, not an object) is skipped and counted, never fatal; the files are opened as they are written, never
through a symbolic link."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mam.audit.trail import KEEP, NAME, open_dot_mam, open_file
from mam.util.errors import MamError

READ_LIMIT = 64 * 1024 * 1024  # bytes read of one file at most (its end): rotation keeps each near ROTATE_AT
DEFAULT_LIMIT = 100  # lines shown unless --limit says (0: all)
_AGO = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
FIELDS = ("at", "time", "user", "face", "client", "token_id", "action", "agent", "arguments", "result", "exit",
          "message")


def parse_since(text: str, now: float) -> float:
    """--since: an age (90s, 15m, 2h, 3d: that long ago) or an ISO 8601 date or time (a time without an offset is
    UTC, as the trail's are). The epoch seconds it names; a usage error for anything else."""
    match = _AGO.fullmatch(text.strip())
    if match:
        return now - float(match.group(1)) * _UNITS[match.group(2)]
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise MamError("usage", f"--since {text!r}: expected an age (90s, 15m, 2h, 3d) or an ISO 8601 date or time "
                                "(2026-12-06, 2026-12-06T14:00Z)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _lines(dot: int, name: str) -> tuple[list[bytes], bool]:
    """The lines of `name` in `.mam` (none when it is missing), and whether its start was cut (READ_LIMIT)."""
    try:
        fd = open_file(dot, name, os.O_RDONLY)
    except FileNotFoundError:
        return [], False
    except OSError as exc:
        raise MamError("operation_failed", f"{name}: cannot read the audit trail: {exc.strerror}") from None
    try:
        size = os.fstat(fd).st_size
        cut = size > READ_LIMIT
        if cut:
            os.lseek(fd, size - READ_LIMIT, os.SEEK_SET)
        chunks = []
        left = READ_LIMIT
        while left > 0:
            chunk = os.read(fd, min(left, 1024 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    lines = b"".join(chunks).split(b"\n")
    if cut and lines:
        lines = lines[1:]  # the part of a line before where the read began: not a torn line
    return [line for line in lines if line.strip()], cut


def _entry(raw: bytes) -> dict[str, Any] | None:
    """A line of the trail as written (mam.audit.trail.line_of), or None for anything else."""
    try:
        entry = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("action"), str) \
            or not isinstance(entry.get("time"), int | float) or isinstance(entry.get("time"), bool) \
            or not isinstance(entry.get("result"), str):
        return None
    out = {key: entry.get(key) for key in FIELDS}
    if not isinstance(out["arguments"], dict):
        out["arguments"] = {}
    for key in ("at", "user", "face", "client", "token_id", "agent", "message"):
        if out[key] is not None and not isinstance(out[key], str):
            out[key] = str(out[key])
    if not isinstance(out["exit"], int) or isinstance(out["exit"], bool):
        out["exit"] = None
    out["at"] = out["at"] or datetime.fromtimestamp(float(entry["time"]), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return out


def read(dot_mam: Path) -> tuple[list[dict[str, Any]], int]:
    """Every line of the trail, oldest first, and how many were skipped: torn, foreign or not an object."""
    dot = open_dot_mam(dot_mam, make=False)
    if dot is None:
        return [], 0
    entries: list[dict[str, Any]] = []
    skipped = 0
    try:
        for name in [*(f"{NAME}.{n}" for n in range(KEEP, 0, -1)), NAME]:
            lines, _ = _lines(dot, name)
            for raw in lines:
                entry = _entry(raw)
                if entry is None:
                    skipped += 1
                else:
                    entries.append(entry)
    finally:
        os.close(dot)
    return entries, skipped


def _about(entry: dict[str, Any], agent: str) -> bool:
    # A failed command over several agents names them all in one line: "a,b".
    return entry["agent"] is not None and agent in entry["agent"].split(",")


def audit_document(dot_mam: Path, since: float | None = None, agent: str | None = None,
                   limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """`mam audit --json`: the last `limit` (0: all) lines since `since` about `agent`, oldest first."""
    entries, skipped = read(dot_mam)
    chosen = [e for e in entries if (since is None or e["time"] >= since) and (agent is None or _about(e, agent))]
    shown = chosen[-limit:] if limit else chosen
    return {"schema": 1, "file": str(dot_mam / NAME), "entries": shown, "matched": len(chosen),
            "skipped": skipped}


def _who(entry: dict[str, Any]) -> str:
    who = entry["user"] or "?"
    if entry["client"]:
        who += f"@{entry['client']}"
    if entry["token_id"]:
        who += f" (token {entry['token_id']})"
    return who


def _result(entry: dict[str, Any]) -> str:
    result = str(entry["result"])
    if result != "ok" and entry["exit"] is not None:
        result += f" ({entry['exit']})"
    return result


def audit_text(doc: dict[str, Any]) -> str:
    """The table for people: TIME, WHO, FACE, ACTION, AGENT, RESULT, MESSAGE; every cell made visible."""
    from mam.util.render import table  # start-up: only the table for people needs it, not --json

    if not doc["entries"]:
        return f"no audit lines match ({doc['file']})"
    rows = [(e["at"], _who(e), e["face"] or "?", e["action"], e["agent"] or "-", _result(e), e["message"] or "")
            for e in doc["entries"]]
    text = table(("TIME", "WHO", "FACE", "ACTION", "AGENT", "RESULT", "MESSAGE"), rows)
    if doc["matched"] > len(doc["entries"]):
        text += f"\n(the last {len(doc['entries'])} of {doc['matched']} lines: --limit 0 shows all)"
    return text
