"""The restore backoff and crash-loop rule (mam/agents/backoff.py), the row fields that keep them, and their
settings."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from conftest import Workspace
from mam.agents import backoff
from mam.util.errors import MamError

RULES = backoff.Policy(backoff=10.0, limit=3, window=600.0)
NOW = datetime(2026, 12, 5, 9, 0, 0, tzinfo=UTC).timestamp()


def stamp(seconds_ago: float) -> str:
    return datetime.fromtimestamp(NOW - seconds_ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_row_never_restored_is_restored_at_once() -> None:
    assert backoff.held_back({}, RULES, NOW) is None
    assert backoff.held_back({"restore_times": [stamp(700)]}, RULES, NOW) is None  # outside the window


def test_the_delay_doubles_with_each_restore_in_the_window() -> None:
    once = {"restore_times": [stamp(5)]}
    held = backoff.held_back(once, RULES, NOW)
    assert held is not None and held[0] == "backoff" and "waits 10 s after the last (5 s more)" in held[1]
    assert backoff.held_back({"restore_times": [stamp(11)]}, RULES, NOW) is None
    twice = {"restore_times": [stamp(100), stamp(15)]}  # the second restore waits 20 s
    held = backoff.held_back(twice, RULES, NOW)
    assert held is not None and held[0] == "backoff" and "waits 20 s" in held[1]
    assert backoff.held_back({"restore_times": [stamp(100), stamp(21)]}, RULES, NOW) is None


def test_limit_restores_in_the_window_are_a_crash_loop_whatever_the_delay() -> None:
    held = backoff.held_back({"restore_times": [stamp(500), stamp(400), stamp(300)]}, RULES, NOW)
    assert held is not None and held[0] == "crash_loop"
    assert held[1] == "crash loop: restored 3 times within 600 s, so not again"
    # One of them has left the window: two remain, and the delay for a third (20 s) has passed.
    assert backoff.held_back({"restore_times": [stamp(601), stamp(400), stamp(300)]}, RULES, NOW) is None


def test_a_restore_is_counted_and_the_times_are_bounded() -> None:
    fields = backoff.counted({"restore_count": 4, "restore_times": [stamp(i) for i in range(60)]}, "T")
    assert fields["restore_count"] == 5
    assert len(fields["restore_times"]) == backoff.KEPT_TIMES and fields["restore_times"][-1] == "T"
    assert backoff.counted({}, "T") == {"restore_count": 1, "restore_times": ["T"]}


@pytest.mark.parametrize(("var", "value"), [("MAM_RESTORE_BACKOFF", "-1"), ("MAM_RESTORE_LIMIT", "0"),
                                            ("MAM_RESTORE_LIMIT", "2.5"), ("MAM_RESTORE_WINDOW", "soon")])
def test_a_bad_setting_is_refused(var: str, value: str) -> None:
    with pytest.raises(MamError) as caught:
        backoff.policy({var: value})
    assert caught.value.code == "usage" and f"${var}={value}" in caught.value.message


def test_the_settings_are_read() -> None:
    assert backoff.policy({"MAM_RESTORE_BACKOFF": "0.5", "MAM_RESTORE_LIMIT": "2", "MAM_RESTORE_WINDOW": "30"}) == \
        backoff.Policy(0.5, 2, 30.0)
    assert backoff.policy({}) == backoff.Policy(10.0, 5, 600.0)


def test_restore_refuses_a_bad_setting_with_exit_2(ws: Workspace) -> None:
    proc = ws.mam("restore", "--all", env={**ws.env, "MAM_RESTORE_LIMIT": "0"})
    assert proc.returncode == 2 and "$MAM_RESTORE_LIMIT=0" in proc.stderr


ROW = "sessions:\n  - {name: a, backend: tmux, server: s1, status: terminated, %s}\n"


@pytest.mark.parametrize("field", ["restore_count: x", "restore_count: -1", "exit_status: true",
                                   "exit_signal: 1.5", "last_output: boom", "last_output: [1, 2]",
                                   "restore_times: 2026-12-05", "crash_loop_at: [1]", "spawn_failed: yes-ish"])
def test_a_hand_edit_that_breaks_a_field_is_refused_with_its_line(ws: Workspace, field: str) -> None:
    ws.write_registry(ROW % field)
    proc = ws.mam("status", "--no-state")
    assert proc.returncode == 2, proc.stderr
    assert f"agent-sessions.yaml:2: {field.split(':')[0]}" in proc.stderr


def test_status_shows_what_the_row_keeps(ws: Workspace) -> None:
    ws.write_registry(ROW % ('restore_count: 3, restore_times: ["2026-12-05T09:00:00Z"], restored_at: '
                             '"2026-12-05T09:00:00Z", crash_loop_at: "2026-12-05T09:01:00Z", exit_status: 3, '
                             'last_output: ["loading", "error: boom"]'))
    entry = ws.mam_json("status", "--no-state")["sessions"][0]
    assert entry["restore_count"] == 3 and entry["crash_loop"] is True and entry["exit_status"] == 3
    assert entry["exit_signal"] is None and entry["last_output"] == ["loading", "error: boom"]
    assert entry["restored_at"] == "2026-12-05T09:00:00Z"
    ws.write_registry(ROW % "agent: sh")
    entry = ws.mam_json("status", "--no-state")["sessions"][0]
    assert (entry["restore_count"], entry["crash_loop"], entry["exit_status"], entry["last_output"]) == (0, False,
                                                                                                          None, [])
