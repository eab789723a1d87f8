"""Issue 30, point 7: a watch loop (`status --watch`, `watch`, `reconcile --watch`) outlives a registry that
cannot be read for a round (an editor's save, a half-synced file): it says so on stderr and tries again next
round; only a registry unreadable for UNREADABLE_ROUNDS rounds in a row ends it, exit 2. Against the fake herdr."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Any

import pytest

from conftest import Workspace
from mam.cli.queries import UNREADABLE_ROUNDS

ROW = 'version: 1\nsessions:\n- {"name": "a", "server": "live", "status": "running", "agent": "claude"}\n'
ROW_B = '- {"name": "b", "server": "live", "status": "running"}\n'  # gone from its server: drift
BROKEN = "version: 1\nsessions: [\n"  # a file cut short mid-save: not valid YAML
INTERVAL = "0.2"
LOOPS = {
    "status-watch": ["status", "--watch", INTERVAL, "--json"],
    "watch": ["watch", "--interval", INTERVAL, "--json"],
    "reconcile-watch": ["reconcile", "--apply", "--watch", INTERVAL, "--json"],
}


def _agent(status: str) -> list[dict[str, Any]]:
    return [{"agent": "claude", "agent_status": status, "cwd": "/repo", "name": "a", "pane_id": "w1:p1",
             "terminal_id": "term_1"}]


class Loop:
    """A watch loop as a real process, its stdout and stderr read line by line as they come."""

    def __init__(self, ws: Workspace, args: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "mam", *args], env=ws.env, cwd=ws.root, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self.out: queue.Queue[str] = queue.Queue()
        self.err: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, lines), daemon=True).start()

    @staticmethod
    def _pump(stream: IO[str] | None, lines: queue.Queue[str]) -> None:
        assert stream is not None
        for line in stream:
            lines.put(line)

    def stdout_line(self, seconds: float = 30) -> str:
        return self.out.get(timeout=seconds)

    def stderr_until(self, words: str, seconds: float = 30) -> str:
        """The first stderr line from now that holds `words`; every line read is kept in `self.stderr`."""
        deadline = time.monotonic() + seconds
        while True:
            line = self.err.get(timeout=max(0.01, deadline - time.monotonic()))
            self.stderr.append(line)
            if words in line:
                return line

    def end(self) -> int:
        """Ctrl-C, as the user ends a watch: exit 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=30)


@pytest.fixture
def loop_ws(ws: Workspace) -> Workspace:
    ws.herdr.start("live")
    ws.herdr.set_agents("live", _agent("working"))
    ws.write_registry(ROW)
    return ws


def _replace(ws: Workspace, text: str) -> None:
    """The registry replaced whole (as an editor saves), so that no round reads half of the write itself."""
    tmp = ws.registry.with_name("edit.tmp")
    tmp.write_text(text)
    os.replace(tmp, ws.registry)


def _first_round_seen(loop: Loop, name: str) -> None:
    if name == "watch":
        loop.stderr_until("mam: watching 1 agent")  # its baseline is read
    else:
        json.loads(loop.stdout_line())


@pytest.mark.parametrize("name", list(LOOPS))
def test_one_unreadable_round_is_said_and_the_loop_goes_on(loop_ws: Workspace, name: str) -> None:
    ws = loop_ws
    loop = Loop(ws, LOOPS[name])
    try:
        _first_round_seen(loop, name)
        _replace(ws, BROKEN)
        said = loop.stderr_until(f"round 1 of {UNREADABLE_ROUNDS} in a row that could not read the registry")
        _replace(ws, ROW + ROW_B)  # fixed, with a row more: the rounds after it show it
        assert said.startswith(f"mam: {ws.registry}:") and "not valid YAML" in said and "trying again in 0.2 s" in said
        if name == "watch":  # the loop still runs, and still tells a change
            ws.herdr.set_agents("live", _agent("blocked"))
            change = json.loads(loop.stdout_line())
            assert (change["name"], change["to"]) == ("a", "blocked"), change
        else:
            deadline = time.monotonic() + 30
            while '"b"' not in loop.stdout_line():  # documents of the rounds before the break come first
                assert time.monotonic() < deadline
        time.sleep(1.5)  # longer than UNREADABLE_ROUNDS rounds: a loop that had given up would have ended
        assert loop.proc.poll() is None, loop.proc.stderr
    finally:
        code = loop.end()
    assert code == 0
    assert ws.registry.read_text().startswith("version: 1\nsessions:\n- {")  # never rewritten while broken


@pytest.mark.parametrize("name", list(LOOPS))
def test_a_registry_unreadable_for_good_ends_the_loop_after_its_rounds(loop_ws: Workspace, name: str) -> None:
    ws = loop_ws
    loop = Loop(ws, LOOPS[name])
    try:
        _first_round_seen(loop, name)
        began = time.monotonic()
        _replace(ws, BROKEN)
        code = loop.proc.wait(timeout=30)
        took = time.monotonic() - began
    finally:
        loop.end()
    assert code == 2
    time.sleep(0.2)  # the reader thread takes in what is left
    lines = [*loop.stderr, *_drain(loop.err)]
    retries = [line for line in lines if "that could not read the registry; trying again" in line]
    assert [f"round {n} of {UNREADABLE_ROUNDS}" in line for n, line in enumerate(retries, 1)] == \
        [True] * (UNREADABLE_ROUNDS - 1), lines
    last = [line for line in lines if line.startswith("mam: ") and "trying again" not in line
            and "watching" not in line][-1]
    assert last.startswith(f"mam: {ws.registry}:") and f"({UNREADABLE_ROUNDS} rounds in a row)" in last, lines
    assert any(line.startswith("hint: fix the file by hand") for line in lines), lines
    assert took < 15, f"{UNREADABLE_ROUNDS} rounds of {INTERVAL} s took {took:.1f} s"
    assert ws.registry.read_text() == BROKEN


def _drain(lines: queue.Queue[str]) -> list[str]:
    out = []
    while True:
        try:
            out.append(lines.get_nowait())
        except queue.Empty:
            return out


def test_the_documented_count_is_the_one_mam_uses() -> None:
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    assert f"Only {UNREADABLE_ROUNDS} such rounds in a row end the loop" in text
    assert f"with `({UNREADABLE_ROUNDS} rounds in a row)`, and exit 2" in text
