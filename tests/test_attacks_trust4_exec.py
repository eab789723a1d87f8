"""Issue 30, point 8: `--exec CMD` of `mam top` and `mam watch` runs one change at a time, in order, with a bounded
queue that drops (counts, and says) the oldest waiting change. `mam top` started a run for every batch of changes
with no bound (agents flipping every 1.5 s and a slow CMD: runs 125 s late, out of order, memory growing);
`mam watch` ran it in its reading loop, so a slow CMD stopped the readings."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import Tmux, Workspace
from mam.live.notify import EXEC_QUEUE, Announcer

STANDIN_DIR = str(Path(__file__).parent / "agents")


def slow_recorder(out: Path, seconds: float) -> list[str]:
    """A command that records, per run, its pid, the change it got, and when it began and ended."""
    code = ("import json, os, sys, time; change = json.loads(sys.stdin.read()); began = time.time(); "
            f"time.sleep({seconds}); "
            f"open({str(out)!r}, 'a').write(json.dumps([os.getpid(), change, began, time.time()]) + '\\n')")
    return [sys.executable, "-c", code]


def started_recorder(out: Path, started: Path, seconds: float) -> list[str]:
    """slow_recorder that also writes its pid to `started` as it begins."""
    code = ("import json, os, sys, time; change = json.loads(sys.stdin.read()); began = time.time(); "
            f"open({str(started)!r}, 'a').write(str(os.getpid()) + '\\n'); time.sleep({seconds}); "
            f"open({str(out)!r}, 'a').write(json.dumps([os.getpid(), change, began, time.time()]) + '\\n')")
    return [sys.executable, "-c", code]


def runs(out: Path) -> list[list[Any]]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def alive(pid: int | str, within: float = 5) -> bool:
    """Whether process `pid` still runs after `within` seconds (a zombie has ended)."""
    deadline = time.monotonic() + within
    while True:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return False
        except OSError:
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)


def assert_one_at_a_time(done: list[list[Any]]) -> None:
    for before, after in zip(done, done[1:], strict=False):
        assert after[2] >= before[3] - 0.05, f"run {after[1]} began before {before[1]} ended"


def test_runs_are_one_at_a_time_in_order_and_the_oldest_waiting_are_dropped_counted_and_said(tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    said: list[str] = []
    announcer = Announcer(False, slow_recorder(out, 0.3), dict(os.environ), tell=said.append, queue=3)
    for n in range(12):  # all at once: far faster than one run
        announcer.announce({"name": f"a{n:02}", "to": "blocked", "at": f"t{n}", "n": n})
    assert announcer.runs.idle(60)
    done = runs(out)
    got = [run[1]["n"] for run in done]
    assert got == sorted(got) and got[-3:] == [9, 10, 11], got  # in order, the newest kept
    assert len(got) in (3, 4), got  # the one that ran first (if it began before the rest came), then the queue
    assert_one_at_a_time(done)
    assert announcer.runs.dropped == 12 - len(got)
    drops = [line for line in said if "dropped" in line]
    assert len(drops) == 12 - len(got), said
    assert f"({12 - len(got)} dropped so far; at most 3 changes wait" in drops[-1], drops
    assert "the change of a08 to blocked at t8 was dropped" in drops[-1], drops


def test_closing_kills_the_run_in_progress_and_runs_no_more(tmp_path: Path) -> None:
    out, started = tmp_path / "runs.jsonl", tmp_path / "started"
    announcer = Announcer(False, started_recorder(out, started, 30), dict(os.environ), tell=lambda _: None)
    for n in range(3):
        announcer.announce({"name": f"a{n}", "to": "done", "at": "t", "n": n})
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(started.read_text().split()[0])
    assert announcer.close() == 2  # the two waiting are not run
    assert not alive(pid)
    time.sleep(0.5)
    assert started.read_text().split() == [str(pid)] and runs(out) == []


def test_a_run_that_starts_as_the_watch_closes_is_killed_with_it(tmp_path: Path) -> None:
    """The queue's thread took a change just before `close`, and starts the command after it: `close` found no
    run to kill, and the command (in a session of its own) outlived mam, the daemon thread that would have
    timed it out gone with mam."""
    out, started = tmp_path / "runs.jsonl", tmp_path / "started"
    announcer = Announcer(False, started_recorder(out, started, 30), dict(os.environ), tell=lambda _: None)
    assert announcer.close() == 0
    began = time.monotonic()
    announcer._exec({"name": "a", "to": "done", "at": "t"})  # as the queue's thread does with the change it took
    assert time.monotonic() - began < 10  # not the command's 30 s
    assert runs(out) == []
    pids = started.read_text().split() if started.exists() else []
    assert all(not alive(pid) for pid in pids), pids


# -- mam top ----------------------------------------------------------------------------------------------------


class Flipping:
    """One agent that turns done, then working, then done again, at each reading; the evidence says which
    reading it was."""

    def __init__(self, env: dict[str, str]) -> None:
        import types

        self.app = types.SimpleNamespace(env=env)
        self.readings = 0

    def registered(self) -> list[dict[str, Any]]:
        return [{"name": "flipper", "backend": "tmux", "server": "team", "host": "", "status": "running"}]

    def fetch(self, group: tuple[str, str]) -> dict[str, Any]:
        self.readings += 1
        state = "done" if self.readings % 2 == 0 else "working"
        return {"sessions": [{"name": "flipper", "backend": "tmux", "server": "team", "host": None,
                              "status": "running", "live": "alive", "state": state, "state_source": "screen",
                              "evidence": {"rule": f"codex.{state}", "line": f"reading {self.readings}"}}],
                "servers": [{"backend": "tmux", "server": "team", "host": None, "state": "up", "error": None}]}


def test_top_exec_runs_one_at_a_time_in_order_and_says_what_it_dropped(tmp_path: Path) -> None:
    pytest.importorskip("textual")
    from textual.widgets import Static

    from mam.cli.topview import TopApp

    out, started = tmp_path / "runs.jsonl", tmp_path / "started"
    app = TopApp(Flipping(dict(os.environ)), interval=0.2,  # type: ignore[arg-type]
                 command=started_recorder(out, started, 0.8))
    bottom: list[str] = []

    async def scenario() -> None:
        async with app.run_test(size=(120, 20)) as pilot:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                said = str(app.query_one("#said", Static).render())
                bottom.append(said)
                if "dropped" in said and len(runs(out)) >= 2:
                    break
                await pilot.pause(0.1)

    asyncio.run(scenario())
    done = runs(out)
    readings = [int(run[1]["evidence"]["line"].split()[1]) for run in done]
    assert readings == sorted(readings) and len(set(readings)) == len(readings), readings
    assert_one_at_a_time(done)
    assert any("--exec is behind" in line and "dropped so far" in line and f"at most {EXEC_QUEUE}" in line
               for line in bottom), bottom[-5:]
    # The run in progress when the view closed was killed with it: none is left running.
    assert not [pid for pid in started.read_text().split() if alive(pid)]


# -- mam watch --------------------------------------------------------------------------------------------------

FLIPPER = f"""import sys, time
sys.path.insert(0, {STANDIN_DIR!r})
import standin
i = 0
while True:
    state = ("blocked", "working")[i % 2]
    sys.stdout.write("\\x1b[H\\x1b[2J" + standin.screen("claude", state, i))
    sys.stdout.flush()
    i += 1
    time.sleep(0.8)
"""


def test_watch_exec_keeps_reading_runs_in_order_and_drops_the_oldest(ws: Workspace, tmux: Tmux,
                                                                      tmp_path: Path) -> None:
    server = tmux.name()
    proc = ws.mam("spawn", "flipper", "--agent", "claude", "--server", server, "--command", sys.executable, "--",
                  "-c", FLIPPER)
    assert proc.returncode == 0, proc.stderr
    out, started = tmp_path / "runs.jsonl", tmp_path / "started"
    command = shlex.join(started_recorder(out, started, 5))
    watch = subprocess.Popen([sys.executable, "-m", "mam", "watch", "--interval", "0.2", "--json",
                              "--on", "blocked,working", "--exec", command],
                             env=ws.env, cwd=ws.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert watch.stderr is not None
        assert watch.stderr.readline().startswith("mam: watching 1 agent")
        time.sleep(16)
        watch.send_signal(signal.SIGINT)
        stdout, stderr = watch.communicate(timeout=30)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert watch.returncode == 0, stderr
    told = [json.loads(line) for line in stdout.splitlines()]
    done = runs(out)
    # The readings went on while the command ran: far more changes told than runs.
    assert len(done) >= 1 and len(told) >= 2 * (len(done) + 1), (len(told), len(done))
    assert_one_at_a_time(done)
    # Each run got a change told, in the order told (a subsequence of stdout).
    at = 0
    for run in done:
        while at < len(told) and told[at] != run[1]:
            at += 1
        assert at < len(told), f"run {run[1]} out of order or never told"
        at += 1
    # The oldest waiting were dropped, counted and said; the one running at Ctrl-C was killed.
    drops = [line for line in stderr.splitlines() if "--exec is behind" in line]
    assert drops and "(1 dropped so far" in drops[0] and f"at most {EXEC_QUEUE} changes wait" in drops[0], stderr
    assert "not run (the watch ended)" in stderr, stderr
    pids = started.read_text().split()
    # The run in progress at Ctrl-C, if one was (under load the last may have ended just before), never ended.
    assert len(pids) in (len(done), len(done) + 1), (pids, len(done))
    assert not alive(pids[-1])
