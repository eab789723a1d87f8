"""`mam send` that knows what it delivered, and `mam wait` on several agents, on real tmux: a stand-in agent
(tests/agents/recorder.py) records every byte its terminal reads, so a test sees exactly what arrived."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conftest import Tmux, Workspace

AGENTS = Path(__file__).parent / "agents"
RECORDER = str(AGENTS / "recorder.py")
STANDIN = str(AGENTS / "standin.py")
START, END = b"\x1b[200~", b"\x1b[201~"


def spawn(ws: Workspace, name: str, server: str, *args: str, program: str = RECORDER) -> None:
    proc = ws.mam("spawn", name, "--agent", "claude", "--server", server, "--command", sys.executable, "--",
                  program, *args)
    assert proc.returncode == 0, proc.stderr


def state_of(ws: Workspace, name: str) -> str:
    return str({s["name"]: s for s in ws.mam_json("status")["sessions"]}[name]["state"])


def until_state(ws: Workspace, name: str, *states: str) -> None:
    """Until the stand-in has drawn its first screen in one of `states` (it needs a moment)."""
    deadline = time.monotonic() + 20
    while state_of(ws, name) not in states:
        assert time.monotonic() < deadline, f"{name} never reached {states}"
        time.sleep(0.2)


def arrived(log: Path, wanted: bytes) -> bytes:
    """What the recorder read, once it holds `wanted` (or after a while: then the test says what came)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        got = log.read_bytes() if log.exists() else b""
        if wanted in got:
            return got
        time.sleep(0.1)
    return log.read_bytes() if log.exists() else b""


def send(ws: Workspace, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mam", "send", *args], env=ws.env, cwd=ws.root, text=True,
                          capture_output=True, timeout=60, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def test_three_lines_arrive_as_one_paste_and_submit_once(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server, log = tmux.name(), tmp_path / "read.log"
    spawn(ws, "rec", server, str(log))
    until_state(ws, "rec", "idle", "done")
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Fix the queue.\nKeep the API.\nRun the tests.\n")
    proc = send(ws, "rec", "--file", str(prompt), "--enter", "--confirm", "20", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    sent = "Fix the queue.\nKeep the API.\nRun the tests."  # the file's last newline dropped
    assert (doc["lines"], doc["characters"], doc["enter"]) == (3, len(sent), True)
    assert doc["delivered"] is True and doc["state_after"] == "working" and doc["state_before"] in ("idle", "done")
    # One bracketed paste (tmux turns its newlines into carriage returns inside it), then one Enter: one submit.
    got = arrived(log, END + b"\r")
    assert got == START + b"Fix the queue.\rKeep the API.\rRun the tests." + END + b"\r"


def test_stdin_and_a_pane_that_asked_for_no_bracketed_paste(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server, log, plain_log = tmux.name(), tmp_path / "read.log", tmp_path / "plain.log"
    spawn(ws, "rec", server, str(log))
    spawn(ws, "plain", server, str(plain_log), "--plain")
    until_state(ws, "rec", "idle", "done")
    until_state(ws, "plain", "idle", "done")
    # No TEXT and stdin not a terminal: stdin is the text, its last newline dropped; no --enter, no submit.
    proc = send(ws, "rec", "--json", stdin="one\r\ntwo\n")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["lines"] == 2 and json.loads(proc.stdout)["delivered"] is None
    assert arrived(log, END) == START + b"one\rtwo" + END
    # One line too long for one tmux command (its 16 KiB message: "command too long") goes as a paste too.
    long = "0123456789" * 2000
    proc = send(ws, "rec", "--file", "-", stdin=long)
    assert proc.returncode == 0 and "pasted 20000 characters" in proc.stdout, proc.stderr
    assert arrived(log, long.encode() + END) == START + b"one\rtwo" + END + START + long.encode() + END
    proc = send(ws, "plain", "-", stdin="a\nb")
    assert proc.returncode == 0, proc.stderr
    # tmux brackets a paste only for a program that asked: this one gets the bare lines (and takes each line end
    # for an Enter, as it would a paste from a terminal).
    assert arrived(plain_log, b"a\rb") == b"a\rb"


def test_escapes_are_refused_before_anything_is_typed(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server, log = tmux.name(), tmp_path / "read.log"
    spawn(ws, "rec", server, str(log))
    until_state(ws, "rec", "idle", "done")
    # An ESC[201~ would end the paste early and the rest would be read as keys (here: a command and Enter).
    for text in ("a\nb\x1b[201~rm -rf build\r", "x\x1b[2J", "one\rtwo"):
        proc = send(ws, "rec", "--", text)
        assert proc.returncode == 2 and "control character" in proc.stderr, proc.stderr
    proc = send(ws, "rec", stdin="fine\n\x1b[201~\n")
    assert proc.returncode == 2 and "control character" in proc.stderr
    time.sleep(0.5)
    assert not log.exists() or log.read_bytes() == b""


def test_a_blocked_agent_takes_only_an_answer(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server, log = tmux.name(), tmp_path / "read.log"
    spawn(ws, "asks", server, str(log), "--state", "blocked")
    until_state(ws, "asks", "blocked")
    proc = send(ws, "asks", "go on\nand finish", "--enter")
    assert proc.returncode == 1
    assert "blocked on a question" in proc.stderr and "Do you want to proceed?" in proc.stderr
    assert "--answer" in proc.stderr
    time.sleep(0.5)
    assert not log.exists() or log.read_bytes() == b""  # nothing reached it
    proc = send(ws, "asks", "--answer", "1", "--enter", "--confirm", "20", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["answer"] is True and doc["state_before"] == "blocked" and doc["delivered"] is True
    assert arrived(log, b"1\r") == b"1\r"
    # Not blocked any more: an answer has no question to go to.
    proc = send(ws, "asks", "--answer", "2")
    assert proc.returncode == 1 and "not blocked" in proc.stderr
    assert log.read_bytes() == b"1\r"


def test_an_answer_whose_question_went_is_delivered_whatever_follows(ws: Workspace, tmux: Tmux) -> None:
    """The answer was taken when the question is gone: a screen no rule matches after it is no blocked screen.
    (It once read `delivered: false`, as if the question were still there.)"""
    spawn(ws, "asks", tmux.name(), "claude", "blocked", "--then", "garbage", "--when-typed", "1", program=STANDIN)
    until_state(ws, "asks", "blocked")
    proc = send(ws, "asks", "--answer", "1", "--enter", "--confirm", "20", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["delivered"], doc["state_after"]) == (True, "unknown")
    assert doc["confirmation"] == "the question is gone: asks is unknown (no rule matches the screen)"
    assert doc["waited"] < 20


def test_confirm_says_when_no_turn_started(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server, log = tmux.name(), tmp_path / "read.log"
    spawn(ws, "deaf", server, str(log), "--deaf")
    until_state(ws, "deaf", "idle", "done")
    proc = send(ws, "deaf", "hello", "--enter", "--confirm", "2", "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["delivered"] is False and doc["state_after"] in ("idle", "done") and doc["waited"] >= 2
    assert doc["confirmation"] in ("no turn started: deaf is still idle", "no turn started: deaf is still done")
    assert "the text may not have been taken: no turn started" in proc.stderr
    proc = send(ws, "deaf", "hello", "--enter", "--confirm", "2")
    assert proc.returncode == 1 and "delivered: false (no turn started: deaf is still" in proc.stdout
    assert arrived(log, b"hello\rhello\r") == b"hello\rhello\r"  # typed all the same
    for bad in ("0", "-1", "nan", "4000"):
        proc = send(ws, "deaf", "x", "--confirm", bad)
        assert proc.returncode == 2, (bad, proc.stderr)


def wait(ws: Workspace, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = ws.mam("wait", *args, "--json")
    return proc.returncode, json.loads(proc.stdout) if proc.stdout else {}, proc.stderr


def test_wait_on_several_agents_any_and_all(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    one, two = tmux.name(), tmux.name()
    spawn(ws, "quick", one, "claude", "working", "--then", "idle", "--after", "2", program=STANDIN)
    spawn(ws, "slow", one, "claude", "working", program=STANDIN)
    spawn(ws, "asks", two, "claude", "blocked", program=STANDIN)
    until_state(ws, "slow", "working")
    code, doc, err = wait(ws, "quick", "slow", "asks", "--until", "idle,done", "--any", "--timeout", "60")
    assert code == 0, err
    assert doc["mode"] == "any" and doc["reached"] and doc["until"] == ["idle", "done"]
    states = {a["name"]: (a["reached"], a["session"]["state"]) for a in doc["agents"]}
    assert states["quick"][0] and states["quick"][1] in ("idle", "done")
    assert states["slow"] == (False, "working") and states["asks"] == (False, "blocked")
    assert [a["server"] for a in doc["agents"]] == [one, one, two]
    code, doc, err = wait(ws, "quick", "slow", "asks", "--until", "idle,done", "--timeout", "1.5")
    assert code == 1 and doc["mode"] == "all" and not doc["reached"]
    assert "timed out after 1.5 s" in err and "slow: working" in err and "asks: blocked" in err
    code, doc, err = wait(ws, "quick", "asks", "--until", "idle,done,blocked", "--all", "--timeout", "30")
    assert code == 0 and all(a["reached"] for a in doc["agents"])
    assert ws.mam("wait", "quick", "slow", "--until", "idle", "--any", "--all").returncode == 2
    assert ws.mam("wait", "quick", "quick", "--until", "idle").returncode == 2
    # One that is gone ends a wait for all at once; a wait for any waits on the others.
    tmux.run(two, "kill-server")
    code, doc, err = wait(ws, "quick", "asks", "--until", "idle,done", "--timeout", "30")
    assert code == 1 and "down" in err
    code, doc, err = wait(ws, "slow", "asks", "quick", "--until", "idle,done", "--any", "--timeout", "30")
    assert code == 0 and [a["reached"] for a in doc["agents"]] == [False, False, True]
