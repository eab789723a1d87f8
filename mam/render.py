"""Readable tables for people. Colour only on a terminal, and never with NO_COLOR set."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

_COLOURS = {"up": "32", "alive": "32", "down": "31", "absent": "31", "unknown": "33"}


def use_colour() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def paint(text: str, colour: bool) -> str:
    code = _COLOURS.get(text)
    return f"\x1b[{code}m{text}\x1b[0m" if colour and code else text


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return str(value).replace("\n", "\\n").replace("\t", " ")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], colour_columns: Sequence[int] = ()) -> str:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    colour = use_colour()
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in cells:
        parts = []
        for i, (value, width) in enumerate(zip(row, widths, strict=True)):
            padded = value.ljust(width)
            parts.append(paint(value, colour) + padded[len(value):] if i in colour_columns else padded)
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def servers_table(servers: Sequence[dict[str, Any]]) -> str:
    rows = [(s["backend"], s["server"], s["state"], s["agents"], (s["error"] or {}).get("message"))
            for s in servers]
    return table(("BACKEND", "SERVER", "STATE", "AGENTS", "DETAIL"), rows, colour_columns=(2,))


def status_text(doc: dict[str, Any]) -> str:
    parts = [f"workspace {doc['workspace']}"]
    if doc["sessions"]:
        rows = [(s["name"], s["backend"], s["server"], s["status"], s["live"], s["agent"], s["pane_id"], s["cwd"])
                for s in doc["sessions"]]
        parts.append(table(("NAME", "BACKEND", "SERVER", "STATUS", "LIVE", "AGENT", "PANE", "CWD"), rows,
                           colour_columns=(4,)))
    else:
        parts.append(f"no agents registered in {doc['registry']}")
    if doc["servers"]:
        parts.append("")
        parts.append(servers_table(doc["servers"]))
    return "\n".join(parts)


def reconcile_text(doc: dict[str, Any]) -> str:
    parts = [f"workspace {doc['workspace']}"]
    if doc["servers"]:
        parts.append(servers_table(doc["servers"]))
    if doc["drifts"]:
        rows = [(d["class"], d["name"], d["backend"], d["server"], d["status"], d["live"], d["action"])
                for d in doc["drifts"]]
        parts.append("")
        parts.append(table(("DRIFT", "NAME", "BACKEND", "SERVER", "STATUS", "LIVE", "ACTION"), rows))
    else:
        parts.append("no drift: the registry matches what the servers say")
    if doc["unconfirmed"]:
        parts.append(f"unconfirmed (their server did not answer): {', '.join(doc['unconfirmed'])}")
    fixes = sum(1 for d in doc["drifts"] if d["action"] != "report")
    if not doc["applied"]:
        if fixes:
            parts.append("nothing written; run with --apply to fix")
        return "\n".join(parts)
    written = doc["written"]
    if written:  # only what really reached the file is called applied
        parts.append(f"fixes applied to {doc['registry']} ({written} row{'s' if written != 1 else ''})")
    if fixes > written:
        parts.append(f"left {fixes - written} row{'s' if fixes - written != 1 else ''} alone: changed since "
                     "the servers were asked; run `mam reconcile` again")
    elif not written and doc["drifts"]:
        parts.append("nothing written: no drift that --apply can fix")
    return "\n".join(parts)


def ls_text(doc: dict[str, Any]) -> str:
    server = doc["server"]
    head = servers_table([server])
    if not doc["agents"]:
        return head
    rows = [(a["name"], a["agent"], a["state"], a["pane_id"], a["cwd"]) for a in doc["agents"]]
    return head + "\n\n" + table(("NAME", "AGENT", "STATE", "PANE", "CWD"), rows)


def backends_text(doc: dict[str, Any]) -> str:
    rows = [(("* " if b["default"] else "  ") + b["name"], b["provider"], b["binary"] or "not found",
             b["version"], b["error"]) for b in doc["backends"]]
    return table(("  NAME", "PROVIDER", "BINARY", "VERSION", "ERROR"), rows)


def env_text(doc: dict[str, Any]) -> str:
    lines = [f"a server bootstrap would get {doc['variables']} variables"]
    if doc["removed"]:
        lines.append(table(("REMOVED", "RULE", "SOURCE"),
                           [(d["name"], d["rule"], d["source"]) for d in doc["removed"]]))
    else:
        lines.append("nothing to remove")
    if doc["kept"]:
        lines.append("")
        lines.append(table(("KEPT", "MATCHED", "KEPT BY", "SOURCE"),
                           [(d["name"], d["rule"], d["kept_by"], d["kept_source"]) for d in doc["kept"]]))
    return "\n".join(lines)
