"""The model behind `mam top` (mam.live.topmodel), without a terminal: the order of the rows, the filter, the columns
that fit a width, the refresh pacing, and the poller that keeps a hung server from holding up the others. Then
the command's refusals and its start-up promise: no other command imports Textual."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from conftest import Workspace
from mam.live.topmodel import (
    COLUMNS,
    DROP_ORDER,
    WIDTHS,
    Pacer,
    Poller,
    TopRow,
    ago,
    cell_of,
    columns_for,
    end_text,
    filtered,
    fingerprint,
    ordered,
)
from mam.util.errors import MamError


def top_row(name: str, state: str, server: str = "s1", host: str = "", backend: str = "tmux") -> TopRow:
    return TopRow(name, backend, server, host, "running", "alive", state, "screen", "")


def test_blocked_first_then_done_then_the_rest_by_name() -> None:
    rows = [top_row("a", "working"), top_row("b", "done"), top_row("c", "idle"), top_row("z", "blocked"),
            top_row("d", "unknown"), top_row("y", "blocked")]
    assert [r.name for r in ordered(rows)] == ["y", "z", "b", "a", "c", "d"]


def test_the_filter_matches_name_state_backend_server_or_host_every_word() -> None:
    rows = [top_row("fixer", "blocked", "team"), top_row("writer", "idle", "solo", host="box"),
            top_row("tester", "working", "team", backend="herdr")]
    assert [r.name for r in filtered(rows, "FIX")] == ["fixer"]
    assert [r.name for r in filtered(rows, "idle")] == ["writer"]
    assert [r.name for r in filtered(rows, "herdr")] == ["tester"]
    assert [r.name for r in filtered(rows, "team")] == ["fixer", "tester"]
    assert [r.name for r in filtered(rows, "box")] == ["writer"]
    assert [r.name for r in filtered(rows, "local team blocked")] == ["fixer"]  # every word must match
    assert len(filtered(rows, "  ")) == 3


@pytest.mark.parametrize("width", [60, 80, 100, 120, 160, 200])
@pytest.mark.parametrize("work", [False, True])
def test_columns_fit_the_width_and_drop_in_the_stated_order(width: int, work: bool) -> None:
    shown = columns_for(width, work)
    assert shown[0] == "name" and "state" in shown and shown[-1] == "why"
    order = [c for c in DROP_ORDER if work or c != "work"]
    dropped = [c for c in COLUMNS if c not in shown and (work or c != "work")]
    assert set(dropped) == set(order[:len(dropped)])  # always the first ones of the order
    if len(dropped) < len(order):
        assert sum(WIDTHS.get(c, 0) + 2 for c in shown) + 20 <= width


def test_80_columns_keep_name_server_state_for_and_why() -> None:
    assert columns_for(80) == ["name", "server", "state", "for", "why"]
    assert columns_for(160) == [c for c in COLUMNS if c != "work"]  # WORK only when an agent has a worktree
    assert columns_for(160, work=True) == list(COLUMNS)
    assert columns_for(80, work=True) == ["name", "server", "state", "for", "why"]


def test_work_keeps_its_column_over_host_and_backend_and_else_rides_in_why() -> None:
    """Issue 34, 2: WORK goes after HOST and BACKEND; where it is dropped the reason cell carries it."""
    assert "work" in columns_for(120, work=True) and "host" not in columns_for(120, work=True)
    row = TopRow("fixer", "tmux", "s1", "", "running", "alive", "idle", "screen", "at its prompt",
                 work="mam/fixer 2 changed +1")
    narrow = columns_for(80, work=True)
    assert row.cells(0.0)[cell_of("why", narrow)] == "at its prompt [mam/fixer 2 changed +1]"
    assert row.cells(0.0)[cell_of("why", columns_for(160, work=True))] == "at its prompt"
    assert top_row("plain", "idle").cells(0.0)[cell_of("why", narrow)] == ""  # no worktree: nothing added


def test_a_change_of_work_alone_is_a_change() -> None:
    """A commit or an edit in an agent's worktree changes no state, but is news the pacer must not slow past."""
    before = TopRow("fixer", "tmux", "s1", "", "running", "alive", "idle", "screen", "", work="mam/fixer clean")
    after = TopRow("fixer", "tmux", "s1", "", "running", "alive", "idle", "screen", "", work="mam/fixer 1 changed")
    assert fingerprint([before], []) != fingerprint([after], [])


def test_the_pace_slows_while_nothing_changes_and_quickens_on_a_change() -> None:
    pacer = Pacer(base=1.0, most=8.0, factor=2.0)
    assert [pacer.next(False) for _ in range(5)] == [2.0, 4.0, 8.0, 8.0, 8.0]
    assert pacer.next(True) == 1.0
    pacer.next(False)
    pacer.reset()
    assert pacer.interval == 1.0


def test_ages() -> None:
    assert (ago(None, 10), ago(7, 10), ago(0, 125), ago(0, 7200), ago(0, 3 * 86400)) == ("-", "3s", "2m", "2h", "3d")


def doc(group: tuple[str, str], state: str = "idle", server_state: str = "up") -> dict[str, Any]:
    server, host = group
    sessions = [{"name": f"{server}-a", "backend": "tmux", "server": server, "host": host or None,
                 "status": "running", "live": "alive" if server_state == "up" else "unknown", "state": state,
                 "state_source": "screen", "evidence": {"rule": f"gemini.{state}", "line": "x"},
                 "state_age": 30 if server_state == "up" else None}]
    servers = [{"backend": "tmux", "server": server, "host": host or None, "state": server_state,
                "error": None if server_state == "up" else {"kind": "timeout", "message": "timed out after 5 s"}}]
    return {"sessions": sessions, "servers": servers}


class Fleet:
    """Registered agents on three servers; server s3 hangs when told to, until released."""

    def __init__(self) -> None:
        self.hang = threading.Event()
        self.release = threading.Event()
        self.asked: list[tuple[str, str]] = []
        self.down: set[str] = set()

    def registered(self) -> list[Mapping[str, Any]]:
        return [{"name": f"{s}-a", "backend": "tmux", "server": s, "host": "", "status": "running"}
                for s in ("s1", "s2", "s3")]

    def fetch(self, group: tuple[str, str]) -> dict[str, Any]:
        self.asked.append(group)
        if group[0] == "s3" and self.hang.is_set():
            self.release.wait(30)
            return doc(group, "unknown", "unknown")
        if group[0] == "s2" and "s2" in self.down:
            raise MamError("usage", ".mam/states.yaml: bad rule")
        return doc(group, "blocked" if group[0] == "s2" else "idle")


def settle(poller: Poller) -> None:
    deadline = time.monotonic() + 10
    while poller.busy() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_poller_asks_each_server_once_and_a_hung_one_holds_no_other() -> None:
    fleet = Fleet()
    poller = Poller(fleet.registered, fleet.fetch, patience=0.2)
    rows, lines = poller.snapshot()
    assert rows == [] and lines == []
    assert poller.refresh() == 3
    settle(poller)
    rows, lines = poller.snapshot()
    assert [(r.name, r.state) for r in rows] == [("s2-a", "blocked"), ("s1-a", "idle"), ("s3-a", "idle")]
    assert rows[0].why == "gemini.blocked" and lines == []
    first = fingerprint(rows, lines)
    fleet.hang.set()
    assert poller.refresh() == 3
    time.sleep(0.4)  # longer than the patience: s3 is not answering
    assert poller.refresh() == 2  # s1 and s2 asked again; s3's call is still in flight, never a second one
    assert fleet.asked.count(("s3", "")) == 2
    settle_others = time.monotonic() + 10
    while sum(g == ("s1", "") for g in fleet.asked) < 3 and time.monotonic() < settle_others:
        time.sleep(0.01)
    rows, lines = poller.snapshot()
    hung = next(r for r in rows if r.server == "s3")
    # Its last known state, stale, with its age.
    assert hung.stale and hung.state == "idle" and "not answering" in hung.why and "last seen" in hung.why
    assert [(line.server, line.state) for line in lines] == [("s3", "unknown")]
    assert "no answer for" in lines[0].reason and lines[0].last_seen is not None
    assert "last seen" in lines[0].text(time.time())
    assert next(r for r in rows if r.server == "s2").state == "blocked"  # the others still answer
    assert fingerprint(rows, lines) != first
    fleet.release.set()
    settle(poller)
    rows, lines = poller.snapshot()
    answered = next(r for r in rows if r.server == "s3")  # answered, but its server could not be asked
    assert answered.stale and answered.live == "unknown" and answered.state == "idle"
    assert "last seen" in answered.why and "could not be asked" in answered.why
    assert [(line.server, line.state, line.reason) for line in lines] == [("s3", "unknown", "timed out after 5 s")]


def test_a_group_that_fails_is_a_line_not_the_end_of_the_view() -> None:
    fleet = Fleet()
    fleet.down.add("s2")
    poller = Poller(fleet.registered, fleet.fetch, patience=5)
    poller.refresh()
    settle(poller)
    rows, lines = poller.snapshot()
    assert [(line.server, line.reason) for line in lines] == [("s2", ".mam/states.yaml: bad rule")]
    assert next(r for r in rows if r.server == "s2").why == "not read yet"


def test_how_long_in_a_state_counts_from_the_change() -> None:
    fleet = Fleet()
    clock = [1000.0]
    poller = Poller(fleet.registered, fleet.fetch, patience=5, clock=lambda: clock[0])
    poller.refresh()
    settle(poller)
    since = next(r for r in poller.snapshot()[0] if r.server == "s1").since
    clock[0] = 1060.0
    poller.refresh()
    settle(poller)
    row = next(r for r in poller.snapshot()[0] if r.server == "s1")
    assert row.since == since == 1000.0 and row.cells(clock[0])["for"] == "1m"
    # AGE: how long ago the state's source said so (its state_age at the reading), growing until the next one.
    assert row.cells(clock[0])["age"] == "30s" and row.cells(clock[0] + 5)["age"] == "35s"


def test_a_hung_server_keeps_its_agents_last_known_state_and_for_keeps_counting() -> None:
    gate = threading.Event()
    answers = ["blocked"]

    def fetch(group: tuple[str, str]) -> dict[str, Any]:
        if answers[-1] == "hang":
            gate.wait(30)
            return doc(group, "unknown", "unknown")
        return doc(group, answers[-1])

    clock = [1000.0]
    poller = Poller(lambda: [{"name": "s3-a", "backend": "tmux", "server": "s3", "host": "", "status": "running"}],
                    fetch, patience=5, clock=lambda: clock[0])
    poller.refresh()
    settle(poller)
    assert [(r.state, r.stale) for r in poller.snapshot()[0]] == [("blocked", False)]
    clock[0] = 1050.0
    answers.append("hang")
    poller.refresh()
    clock[0] = 1070.0  # 20 s into a call that should take under 5
    rows, lines = poller.snapshot()
    row = rows[0]
    assert (row.state, row.stale, row.since) == ("blocked", True, 1000.0)
    assert row.why == "blocked, last seen 1m ago (its server is not answering)"
    assert row.cells(clock[0])["for"] == "1m"  # from when it became blocked, not from when it went quiet
    assert sum(r.state == "blocked" for r in rows) == 1  # what the title counts
    gate.set()
    settle(poller)
    row = poller.snapshot()[0][0]  # the answer says the server could not be asked: still the last known
    assert (row.state, row.stale, row.since) == ("blocked", True, 1000.0)


# The command: refusals, and no other command's start-up pays for Textual.

def test_top_refuses_without_a_terminal_and_points_at_status_watch(ws: Workspace) -> None:
    proc = ws.mam("top")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == "mam: mam top is a full-screen view and needs a terminal"
    assert "mam status --watch" in proc.stderr
    assert ws.mam("top", "--json").returncode == 2


def test_top_without_textual_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, ws: Workspace) -> None:
    from mam.cli.main import run

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.setitem(sys.modules, "textual", None)  # import textual now raises ImportError
    monkeypatch.delitem(sys.modules, "mam.cli.topview", raising=False)  # imported afresh, as in a new process
    monkeypatch.setattr(sys, "stdin", Tty())
    monkeypatch.setattr(sys, "stdout", Tty())
    monkeypatch.setenv("MAM_WORKSPACE", str(ws.root))
    with pytest.raises(MamError) as raised:
        run(["top"])
    assert raised.value.exit_code == 1 and "pip install 'mam[top]'" in raised.value.message
    assert "\n" not in raised.value.message


@pytest.mark.parametrize("args", [["--help"], ["status", "--json"], ["top", "--help"]])
def test_no_other_command_imports_textual(ws: Workspace, args: list[str]) -> None:
    code = ("import sys, runpy\nsys.argv = ['mam', *" + repr(args) + "]\n"
            "try:\n    runpy.run_module('mam', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], env=ws.env, cwd=ws.root, capture_output=True, text=True,
                          timeout=60)
    modules = set(proc.stderr.rsplit("MODULES ", 1)[1].split())
    assert "mam.cli.top" in modules or args != ["top", "--help"]  # the check can see a module that is loaded
    assert not {m for m in modules if m == "textual" or m.startswith(("textual.", "rich"))}
    assert not {"mam.cli.topview", "mam.live.actions", "mam.live.topmodel"} & modules


def test_the_question_is_the_evidence_line_and_the_lines_around_it() -> None:
    from mam.live.topmodel import question

    screen = [f"line {i}" for i in range(10)] + ["Allow it?", "1. Yes", "2. No"]
    assert question("Allow it?", screen, around=2) == ["  line 8", "  line 9", "> Allow it?", "  1. Yes", "  2. No"]
    assert question("gone from the screen", screen) == ["> gone from the screen"]
    assert question("", ["a", "", "b"], around=1) == ["  a", "  b"]


def test_ended_agents_are_a_group_below_the_live_ones_with_their_end_in_why() -> None:
    clock = [1_800_000_000.0]  # 2027-01-15T08:00:00Z
    registered = [
        {"name": "live", "backend": "tmux", "server": "s1", "host": "", "status": "running"},
        {"name": "aaa-stopped", "backend": "tmux", "server": "s1", "host": "", "status": "stopped",
         "stopped_at": "2027-01-15T07:57:00Z"},
        {"name": "crashed", "backend": "tmux", "server": "s1", "host": "", "status": "terminated", "exit_status": 3,
         "last_output": ["Traceback (most recent call last):", "KeyError: 'path'", ""]},
        # Its end read from its exit status (mam.agents.remains.end_of; an `end` key is not the registry's).
        {"name": "finisher", "backend": "tmux", "server": "gone", "host": "", "status": "terminated",
         "end": "finished", "ended_at": "2027-01-15T07:57:00Z", "exit_status": 0},
    ]
    asked: list[tuple[str, str]] = []

    def fetch(group: tuple[str, str]) -> dict[str, Any]:
        asked.append(group)
        return doc(group, "working")

    poller = Poller(lambda: [{**r, "name": "s1-a" if r["name"] == "live" else r["name"]} for r in registered],
                    fetch, patience=5, clock=lambda: clock[0])
    poller.refresh()
    settle(poller)
    rows, lines = poller.snapshot()
    assert asked == [("s1", "")]  # the server of only ended agents is not asked
    assert lines == []  # and is no "down ... never seen" line
    assert [(r.name, r.ended, r.state, r.why) for r in rows] == [
        ("s1-a", False, "working", "gemini.working"),
        ("aaa-stopped", True, "stopped", "stopped 3m ago"),
        ("crashed", True, "failed", "exited 3: KeyError: 'path'"),
        ("finisher", True, "finished", "finished 3m ago"),
    ]
    assert rows[3].cells(clock[0])["for"] == "3m"  # FOR: how long ago it ended


def test_an_end_its_backend_tells_is_in_the_ended_group_before_any_reconcile() -> None:
    """Issue 33, 3 and 4: a pane tmux keeps dead tells how its agent ended while the registry row still says
    `running`; top shows it in the ended group at once, its end in WHY, and still tells a watch of `done` that a
    finished one is done (mam.live.changes)."""
    from mam.live.changes import Changes
    from mam.live.topmodel import as_sessions

    clock = [1_800_000_000.0]  # 2027-01-15T08:00:00Z
    names = ("busy", "fin", "bad", "kil", "gone")
    registered = [{"name": n, "backend": "tmux", "server": "s1", "host": "", "status": "running"} for n in names]
    ends: dict[str, dict[str, Any]] = {
        "fin": {"end": "finished", "exit_status": 0, "last_output": ["finished OK"]},
        "bad": {"end": "failed", "exit_status": 3, "last_output": ["KeyError: 'path'", ""]},
        "kil": {"end": "killed", "exit_signal": 9, "last_output": []},
        "gone": {"end": "lost"},  # no pane at all: it needs you, among the live rows
    }

    def fetch(group: tuple[str, str]) -> dict[str, Any]:
        base = doc(group, "working")
        entry = {**base["sessions"][0], "name": "busy"}
        sessions = [entry] + [{**entry, "name": n, "live": "absent", "state": "unknown", "state_source": "none",
                               "evidence": None, "state_age": None, "ended_at": "2027-01-15T07:58:00Z", **ends[n]}
                              for n in ends]
        return {**base, "sessions": sessions}

    poller = Poller(lambda: registered, fetch, patience=5, clock=lambda: clock[0])
    changes = Changes()
    poller.refresh()
    settle(poller)
    rows, _ = poller.snapshot()
    assert [(r.name, r.ended, r.state, r.why) for r in rows] == [
        ("busy", False, "working", "gemini.working"),
        ("gone", False, "unknown", ""),
        ("bad", True, "failed", "exited 3: KeyError: 'path'"),
        ("fin", True, "finished", "finished 2m ago"),
        ("kil", True, "killed", "killed by signal 9"),
    ]
    assert rows[3].cells(clock[0])["for"] == "2m"  # FOR: since it ended
    before = [{**s, "state": "working", "end": None} if s["name"] == "fin" else s for s in as_sessions(rows)]
    changes.step(before)
    told = changes.step(as_sessions(rows))
    assert [(c["name"], c["from"], c["to"]) for c in told] == [("fin", "working", "done")]


def test_an_ended_agent_s_end_in_top_is_the_one_mam_status_gives(ws: Workspace) -> None:
    """END of `mam status` (mam.agents.remains.end_of) and the ended group of `mam top` agree: an exit from before
    the agent's last restore says nothing of how it ends now (lost), a spawn that failed is `failed`, a stop the
    user asked for is `stopped` whatever the row's status says."""
    from mam.live.actions import Actions
    from mam.registry import text as registry_text
    from mam.servers.app import App

    base = {"backend": "tmux", "server": "gone", "created_at": "2027-01-15T07:00:00Z"}
    rows = [
        {**base, "name": "restored", "status": "terminated", "exit_status": 3, "last_output": ["KeyError: 'path'"],
         "ended_at": "2027-01-15T07:10:00Z", "restored_at": "2027-01-15T07:20:00Z"},
        {**base, "name": "unspawned", "status": "terminated", "spawn_failed": True},
        {**base, "name": "asked-to-stop", "status": "terminated", "stop_requested_at": "2027-01-15T07:57:00Z"},
    ]
    ws.write_registry(registry_text.dump({"version": 1, "sessions": rows}))
    actions = Actions(App.open(str(ws.root), "tmux", ws.env))
    status = {s["name"]: s["end"] for s in ws.mam_json("status")["sessions"]}
    poller = Poller(actions.registered, actions.fetch, patience=5, clock=lambda: 1_800_000_000.0)
    poller.refresh()
    settle(poller)
    shown = {r.name: (r.state, r.why) for r in poller.snapshot()[0]}
    assert {name: state for name, (state, _) in shown.items()} == status == {
        "restored": "lost", "unspawned": "failed", "asked-to-stop": "stopped"}
    assert shown["restored"][1] == "lost" and shown["asked-to-stop"][1] == "stopped 3m ago", shown


def test_an_end_s_last_line_from_a_clone_s_row_is_cleaned_and_cut() -> None:
    """WHY of an ended row quotes its last line, which a clone's registry may hold: a bidi override, an escape
    sequence and 100,000 characters went to serve's page as they were (top's table showed them escaped)."""
    row = {"status": "terminated", "exit_status": 1, "last_output": ["ok \u202eevil\x1b[2J" + "x" * 100_000]}
    why = end_text(row, 0.0)
    assert why.startswith("exited 1: ok evil[2Jx") and why.endswith("...") and len(why) < 250, why[:80]
    assert all(ch.isprintable() for ch in why)
