"""Which source decides an agent's state, and how old its word is (docs/states.md, "Sources").

In order: the agent's own hook report (`mam report`, .mam/reports/<name>.json) while it holds; the backend's
own state (herdr); the title the agent set on its pane; the screen read by the rules. A report holds while it
is fresh (MAM_HOOK_FRESH seconds, default 600), its pane is the one it was written in (same pane id, and the
pane's process is one of the reporting process's ancestors: a restarted pane has a new one), and the screen
has not changed since (beyond a grace of HOOK_GRACE seconds, as the agent redraws right after its hook runs).
A report set aside says why in the evidence of the source that decided instead.
"""

from __future__ import annotations

import json
import math
import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mam.plugin.records import AgentState, PaneCapture

HOOK_FRESH = 600.0
# window_activity counts whole seconds, and an agent draws its prompt just after its Stop hook ran: a change
# within this long after the report is the agent finishing its own drawing, not a new turn.
HOOK_GRACE = 2.0
# A report's time may be ahead of this machine's clock by at most this much (a clock stepped back a little);
# further ahead, or not a finite number, it would be fresh forever, and is set aside.
HOOK_SKEW = 60.0
REPORTS = "reports"
MAX_REPORT = 4096
REPORT_STATES = ("working", "blocked", "idle", "done")


@dataclass(frozen=True)
class Report:
    state: str
    time: float
    panes: Mapping[str, str]
    pids: tuple[int, ...]


def read_report(folder: int, name: str) -> Report | None:
    """The report of agent `name` in the reports folder `folder` (a descriptor: mam.hooks.report.reports_folder), or
    None when there is none or it is not one: a report is anyone's file, so a link or anything but a regular file
    is as if absent, and every field is checked (a bad one is as if absent)."""
    try:
        fd = os.open(f"{name}.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=folder)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = json.loads(os.read(fd, MAX_REPORT + 1)[:MAX_REPORT])
    except (OSError, ValueError, RecursionError):  # nesting deeper than Python's stack: not a report
        return None
    finally:
        os.close(fd)
    if not isinstance(data, dict) or data.get("agent") != name or data.get("state") not in REPORT_STATES:
        return None
    when, panes, pids = data.get("time"), data.get("panes"), data.get("pids")
    if not isinstance(when, (int, float)) or isinstance(when, bool) or not isinstance(panes, dict):
        return None
    if not isinstance(pids, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in pids):
        return None
    return Report(data["state"], float(when), {str(k): str(v) for k, v in panes.items() if isinstance(v, str)},
                  tuple(pids))


def reports(dot_mam: Path, names: list[str]) -> dict[str, Report]:
    """The reports of `names` in `dot_mam`'s reports folder, opened as `mam report` opens it to write: a linked
    `.mam` or `.mam/reports` holds no report (mam.hooks.report.reports_folder)."""
    from mam.hooks.report import reports_folder  # start-up: only when there are reports to read

    folder = reports_folder(dot_mam)
    if folder is None:
        return {}
    try:
        found = {name: read_report(folder, name) for name in names}
    finally:
        os.close(folder)
    return {name: report for name, report in found.items() if report is not None}


def set_aside(report: Report, pane_id: str | None, capture: PaneCapture | None, now: float,
              fresh: float = HOOK_FRESH) -> str | None:
    """Why `report` no longer says the state (None: it does)."""
    if not math.isfinite(report.time):
        return f"its hook report's time is not a number ({report.time!r})"
    age = now - report.time
    if age < -HOOK_SKEW:
        return f"its hook report's time is {-age:.0f} s in the future (more than {HOOK_SKEW:g} s ahead)"
    if age > fresh:
        # Rounded up: a report 600.4 s old is never said to be "600 s old (older than 600 s)".
        return f"its hook report is {math.ceil(age)} s old (older than {fresh:g} s)"
    # The pane variables the report saw (tmux's holds "%3", as the listing spells the pane): none of them naming
    # the agent's pane now is a report from elsewhere (an agent of the same name on another server).
    if pane_id is not None and report.panes and pane_id not in report.panes.values():
        return "its hook report came from another pane"
    if capture is not None:
        if capture.dead:
            return "its pane's program has ended since its hook report"
        if capture.pid is not None and report.pids and capture.pid not in report.pids:
            return "its pane was restarted since its hook report"
        if capture.idle_seconds is not None and age - capture.idle_seconds > HOOK_GRACE:
            return f"its screen changed {age - capture.idle_seconds:.0f} s after its hook report"
    return unproven(report, pane_id, capture)


def unproven(report: Report, pane_id: str | None, capture: PaneCapture | None) -> str | None:
    """Why `report` does not prove it is the agent's own (None: it does). Its file names the agent, and any
    process that can write there can name any agent: only a pane or a process it shares with the agent (the
    agent's pane id among its pane variables, the pane's process among its ancestors) ties it to that agent."""
    if pane_id is not None and pane_id in report.panes.values():
        return None
    if capture is not None and capture.pid is not None and capture.pid in report.pids:
        return None
    if not report.panes and not report.pids:
        return "its hook report names no pane and no process: it proves nothing"
    return "its hook report shares no pane and no process with it that mam can check: it proves nothing"


def from_report(report: Report, now: float, capture: PaneCapture | None = None) -> AgentState:
    """The report's state; `idle` is `done` when no client has looked at the pane since it last changed, as on
    the screen (docs/states.md)."""
    age = max(0.0, now - report.time)
    fact = f"its own hook reported {report.state} " + ("just now" if age < 1 else f"{int(age)} s ago")
    state = report.state
    if state == "idle" and capture is not None and capture.seen is False:
        state, fact = "done", fact + "; no client has looked at it since its last output"
    return AgentState(state, "hook", {"rule": None, "line": None, "fact": fact}, age)


# The titles agents set on their panes (docs/states.md, "Titles"): a prefix or a mark per state. A title says
# working or blocked only in the agent's own marks; anything else (a shell's title, the host name) says nothing.
BRAILLE = tuple(chr(c) for c in range(0x2801, 0x2900))
TITLES: dict[str, tuple[tuple[str, tuple[str, ...], bool], ...]] = {
    # (state, marks, True: the title starts with one; False: holds one anywhere)
    "claude": (("working", BRAILLE + ("◐", "◓", "◑", "◒"), True), ("idle", ("✳",), True)),
    "codex": (("blocked", ("[ ! ] Action Required", "[ . ] Action Required"), False), ("working", BRAILLE, False)),
    "gemini": (("working", ("✦", "⏲"), True), ("blocked", ("✋",), True), ("idle", ("◇  Ready",), True)),
    "grok": (("blocked", ("⚠ Action Required",), False), ("working", BRAILLE, True)),
    "hermes": (("working", ("⏳",), True), ("blocked", ("⚠",), True), ("idle", ("✓",), True)),
}


def title_state(kind: str | None, title: str | None) -> str | None:
    """The state `title` says for an agent of `kind`, read as it is quoted: cleaned as a screen line is (an
    invisible character before a mark neither hides it nor rides along in the evidence)."""
    if not kind or not title or kind not in TITLES:
        return None
    from mam.kinds.classify import quote  # start-up: the screen classifier loads only to quote a title

    text = quote(title)
    for state, marks, prefix in TITLES[kind]:
        if text.startswith(marks) if prefix else any(m in text for m in marks):  # one call for 255 braille marks
            return state
    return None


def from_title(kind: str | None, capture: PaneCapture, screen: AgentState, stale_after: float) -> AgentState | None:
    """The title's state, when it says one and the screen does not contradict it: a prompt on the screen is
    the user's to answer whatever the title shows (Claude Code keeps its spinner under one), a working title on
    a screen unchanged for longer than `stale_after` is stale, and idle unseen is done as on the screen."""
    state = title_state(kind, capture.title)
    if state is None or capture.dead or screen.state == "blocked":
        return None
    idle = capture.idle_seconds
    if state == "working" and idle is not None and idle > stale_after:
        return None
    if state == "idle" and capture.seen is False:
        state = "done"
    from mam.kinds.classify import quote  # start-up: the screen classifier loads only to quote a title

    shown = quote(capture.title or "")[:80]  # cleaned as every quoted line is
    return AgentState(state, "title", {"rule": f"{kind}.title", "line": shown,
                                       "fact": f"the title it set on its pane (the screen says {screen.state})"},
                      idle)


def _with_fact(state: AgentState, fact: str) -> AgentState:
    evidence: dict[str, object] = dict(state.evidence) if state.evidence is not None else {}
    if "field" not in evidence:
        evidence.setdefault("rule", None)
        evidence.setdefault("line", None)
    old = evidence.get("fact")
    evidence["fact"] = f"{old}; {fact}" if old else fact
    return replace(state, evidence=evidence)


def decide(found: Mapping[str, Any], panes: Mapping[str, str | None], found_reports: Mapping[str, Report],
           read_screen: Callable[[Any], AgentState], kind_of: Callable[[Any], str | None] | None = None,
           now: float | None = None, fresh: float = HOOK_FRESH) -> dict[str, AgentState]:
    """Each agent's state from its sources. `found` holds what the backend gave: an AgentState, or a screen
    still to be read (an object with `capture` and `stale_after`: mam.agents.agentstate.Screen) by `read_screen`;
    `kind_of` names a screen's kind, for its title. `panes`: each agent's pane id from the listing."""
    now = time.time() if now is None else now
    out: dict[str, AgentState] = {}
    for name, item in found.items():
        capture: PaneCapture | None = None if isinstance(item, AgentState) else item.capture
        report = found_reports.get(name)
        why = set_aside(report, panes.get(name), capture, now, fresh) if report is not None else None
        if report is not None and why is None:
            out[name] = from_report(report, now, capture)
            continue
        if not isinstance(item, AgentState):
            state = read_screen(item)
            if capture is not None and capture.title and kind_of is not None:
                state = from_title(kind_of(item), capture, state, item.stale_after) or state
            if state.source == "screen" and state.age is None and capture is not None:
                state = replace(state, age=capture.idle_seconds)
        else:
            state = item
        out[name] = _with_fact(state, why) if why is not None else state
    return out
