"""Which source decides (mam.agents.sources), on made-up facts: the hook over herdr's own state while its report is
fresh, the rules that set a report aside, and a title that never hides a prompt on the screen."""

from __future__ import annotations

import os
from pathlib import Path

from mam.agents.agentstate import Screen, read_capture
from mam.agents.sources import MAX_REPORT, Report, decide, from_report, read_report, set_aside, title_state
from mam.kinds.library import load_library
from mam.plugin.records import AgentState, PaneCapture

NOW = 1_000_000.0
STANDIN_WORKING = "● I'll look.\n\n✽ Simplifying recompute_tangents… (2m 18s · ↓ 4.8k tokens)\n\n❯ \n" \
    "  ⏵⏵ bypass permissions on · esc to interrupt\n"
HERDR = AgentState("working", "backend", {"field": "agent_status", "value": "working"})


def report(state: str = "idle", age: float = 5.0, pane: str = "%3", pids: tuple[int, ...] = (40, 30)) -> Report:
    return Report(state, NOW - age, {"TMUX_PANE": pane}, pids)


def screen_of(state: str) -> AgentState:
    return AgentState(state, "screen", {"rule": f"x.{state}", "line": "l", "fact": None})


def test_a_fresh_report_wins_over_the_backends_own_state_and_an_old_one_does_not() -> None:
    fresh = decide({"a": HERDR}, {"a": "w1:p2"}, {"a": Report("idle", NOW - 3, {"HERDR_PANE_ID": "w1:p2"}, ())},
                   screen_of, now=NOW)["a"]
    assert (fresh.state, fresh.source, fresh.age) == ("idle", "hook", 3.0)
    old = decide({"a": HERDR}, {"a": "w1:p2"}, {"a": Report("idle", NOW - 700, {"HERDR_PANE_ID": "w1:p2"}, ())},
                 screen_of, now=NOW)["a"]
    assert (old.state, old.source) == ("working", "backend")
    assert old.evidence is not None and "700 s old" in str(old.evidence["fact"])
    assert decide({"a": HERDR}, {"a": "w1:p2"}, {}, screen_of, now=NOW)["a"] == HERDR


def test_each_rule_that_sets_a_report_aside() -> None:
    same = PaneCapture("x", pid=30, idle_seconds=4.0)
    assert set_aside(report(age=5), "%3", same, NOW) is None  # the screen last changed 1 s after it: a redraw
    assert "another pane" in str(set_aside(report(), "%4", same, NOW))
    assert "restarted" in str(set_aside(report(), "%3", PaneCapture("x", pid=99, idle_seconds=4.0), NOW))
    assert "changed 4 s after" in str(set_aside(report(age=5), "%3", PaneCapture("x", pid=30, idle_seconds=1), NOW))
    assert "ended" in str(set_aside(report(), "%3", PaneCapture("x", dead=True), NOW))
    assert "older than 2 s" in str(set_aside(report(age=5), "%3", same, NOW, fresh=2))


def test_ages_never_read_as_nothing_or_as_the_limit_itself() -> None:
    """Just past the limit is said past it (not "600 s old (older than 600 s)"); a report of this instant is
    "just now", not "0 s ago"."""
    assert set_aside(report(age=600.4), "%3", None, NOW) == "its hook report is 601 s old (older than 600 s)"
    assert from_report(report("working", age=0.3), NOW).evidence == {
        "rule": None, "line": None, "fact": "its own hook reported working just now"}
    assert from_report(report("working", age=7.9), NOW).evidence["fact"] == "its own hook reported working 7 s ago"
    stale = read_capture(load_library(None), ("claude",), PaneCapture(STANDIN_WORKING, idle_seconds=10.2))
    assert stale.evidence["fact"] == "stale: a working screen unchanged for 11 s (more than 10 s)"


def test_a_title_never_hides_a_prompt_on_the_screen() -> None:
    assert title_state("claude", "⠂ Fixing the queue") == "working"
    assert title_state("claude", "✳ Claude Code") == "idle"
    assert title_state("codex", "[ ! ] Action Required") == "blocked"
    assert title_state("claude", "my-host") is None and title_state("aider", "✳ x") is None
    from mam.agents.agentstate import kind_of
    from mam.kinds.library import load_library

    library = load_library(None)

    def kind(item: Screen) -> str | None:
        return kind_of(library, item.kinds, None)

    capture = PaneCapture("x", title="⠂ Fixing the queue", idle_seconds=1.0, seen=True)
    found = {"a": Screen(("claude",), capture, 10.0)}
    blocked = decide(found, {}, {}, lambda s: screen_of("blocked"), kind)["a"]
    assert blocked.source == "screen" and blocked.state == "blocked"
    titled = decide(found, {}, {}, lambda s: screen_of("unknown"), kind)["a"]
    assert (titled.state, titled.source, titled.age) == ("working", "title", 1.0)
    # A working title on a pane unchanged for longer than the stale limit says nothing.
    still = PaneCapture("x", title="⠂ Fixing the queue", idle_seconds=30.0, seen=True)
    assert decide({"a": Screen(("claude",), still, 10.0)}, {}, {}, lambda s: screen_of("unknown"),
                  kind)["a"].source == "screen"


def test_a_report_from_the_future_or_without_a_finite_time_is_set_aside() -> None:
    same = PaneCapture("x", pid=30, idle_seconds=0.0)
    assert set_aside(report(age=-30), "%3", None, NOW) is None  # a little clock skew is allowed
    assert "in the future" in str(set_aside(report(age=-3600), "%3", same, NOW))
    for when in (float("nan"), float("inf"), float("-inf")):
        assert "not a number" in str(set_aside(Report("idle", when, {"TMUX_PANE": "%3"}, (30,)), "%3", same, NOW))
    far = decide({"a": HERDR}, {"a": "w1:p2"}, {"a": Report("idle", NOW + 10**9, {"HERDR_PANE_ID": "w1:p2"}, ())},
                 screen_of, now=NOW)["a"]
    assert (far.state, far.source) == ("working", "backend")
    assert far.evidence is not None and "in the future" in str(far.evidence["fact"])


def test_a_deeply_nested_report_file_is_as_if_absent(tmp_path: Path) -> None:
    nested = "[" * 2000 + "]" * 2000  # fits in MAX_REPORT, deeper than Python's recursion limit
    assert len(nested) <= MAX_REPORT
    (tmp_path / "a.json").write_text(nested)
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert read_report(folder, "a") is None
        # A NaN time in the file parses (json takes NaN) and is then set aside, never fresh forever.
        (tmp_path / "b.json").write_text('{"agent": "b", "state": "idle", "time": NaN, "panes": {}, "pids": []}')
        found = read_report(folder, "b")
    finally:
        os.close(folder)
    assert found is not None and "not a number" in str(set_aside(found, None, None, NOW))
