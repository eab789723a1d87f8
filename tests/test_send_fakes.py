"""`mam send` (one paste, a blocked agent, --answer) and `mam wait` on several agents, on the fake herdr and on
zellij (fake and real): what reached each pane, and how many calls each server got per round."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from conftest import Workspace, ZellijKit
from mam.plugin.records import Agent, CallContext
from mam.testing import FakeRunner
from mam_tmux.backend import TmuxBackend

pytest_plugins = ["mam.testing.pytest_plugin"]

RECORDER = str(Path(__file__).parent / "agents" / "recorder.py")
START, END = b"\x1b[200~", b"\x1b[201~"

REGISTRY = "version: 1\nsessions:\n" + "".join(
    f"  - {{name: {name}, server: {server}, status: running, agent: claude}}\n"
    for name, server in (("ann", "east"), ("bob", "east"), ("cid", "east"), ("dee", "west")))


def herdr(ws: Workspace, **states: str) -> None:
    """The fake herdr sessions east (ann, bob, cid) and west (dee), each agent in the state given (else idle)."""
    ws.write_registry(REGISTRY)
    for server, names in (("east", ("ann", "bob", "cid")), ("west", ("dee",))):
        ws.herdr.start(server)
        ws.herdr.set_agents(server, [{"agent": "claude", "agent_status": states.get(n, "idle"), "cwd": "/repo",
                                      "name": n, "pane_id": f"w1:p{i}", "terminal_id": f"term_{i}"}
                                     for i, n in enumerate(names, 1)])


def typed(ws: Workspace, server: str, pane: str) -> str:
    path = ws.herdr.session_dir(server) / f"typed-{pane.replace(':', '_')}.txt"
    return path.read_text() if path.exists() else ""


def listings(ws: Workspace) -> Counter[str]:
    """How many times each herdr session was asked for its agents."""
    return Counter(c["argv"][1] for c in ws.herdr.calls() if c["argv"][2:4] == ["agent", "list"])


def test_a_blocked_herdr_agent_takes_only_an_answer(ws: Workspace) -> None:
    herdr(ws, bob="blocked")
    proc = ws.mam("send", "bob", "go on", "--enter")
    assert proc.returncode == 1 and "bob is blocked on a question" in proc.stderr and "--answer" in proc.stderr
    assert typed(ws, "east", "w1:p2") == ""
    proc = ws.mam("send", "bob", "--answer", "y", "--enter", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["answer"], doc["state_before"], doc["delivered"]) == (True, "blocked", None)
    assert typed(ws, "east", "w1:p2") == "y<Enter>"
    proc = ws.mam("send", "ann", "--answer", "y")
    assert proc.returncode == 1 and "ann is idle, not blocked" in proc.stderr
    assert typed(ws, "east", "w1:p1") == ""
    assert ws.mam("send", "ann", "x", "--answer", "y").returncode == 2  # TEXT or --answer, not both


def test_send_says_what_it_sent_in_plain_words(ws: Workspace) -> None:
    """One character, several, Enter alone: counted as a person would count them."""
    herdr(ws)
    for args, said in ((("x",), "sent 1 character to ann"),
                       (("xy", "--enter"), "sent 2 characters to ann and Enter"),
                       (("--enter",), "sent Enter to ann"),
                       (("a\nb", "--enter"), "pasted 3 characters to ann and Enter (herdr agent prompt)")):
        proc = ws.mam("send", "ann", *args)
        assert proc.returncode == 0 and proc.stdout == said + "\n", (args, proc.stdout, proc.stderr)


def test_herdr_pastes_several_lines_only_as_a_prompt_it_submits(ws: Workspace) -> None:
    """herdr's `pane send-text` writes the bytes as they are (each line would submit): several lines go through
    `agent prompt`, herdr's one paste, which always submits. Without --enter they are refused, nothing typed."""
    herdr(ws)
    proc = ws.mam("send", "ann", "one\ntwo")
    assert proc.returncode == 1 and "add --enter" in proc.stderr and "nothing was sent" in proc.stderr
    assert typed(ws, "east", "w1:p1") == ""
    proc = ws.mam("send", "ann", "one\ntwo\n#{x} $(id)", "--enter", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["lines"] == 3
    assert typed(ws, "east", "w1:p1") == "\x1b[200~one\ntwo\n#{x} $(id)\x1b[201~<Enter>"
    sent = [c["argv"][2:] for c in ws.herdr.calls() if c["argv"][2:3] in (["pane"], ["agent"])
            and c["argv"][3] in ("send-text", "send-keys", "prompt")]
    assert sent == [["agent", "prompt", "w1:p1", "one\ntwo\n#{x} $(id)"]]
    # A text herdr would read as its own option is refused, never split into two calls.
    proc = ws.mam("send", "bob", "--enter", "--", "--session=x\nmore")
    assert proc.returncode == 1 and "its own option" in proc.stderr and typed(ws, "east", "w1:p2") == ""
    # herdr refuses a prompt to an agent it does not know: its word comes back, exit 1.
    ws.herdr.set_agents("west", [{"agent_status": "idle", "cwd": "/repo", "name": "dee", "pane_id": "w1:p1",
                                  "terminal_id": "term_1"}])
    proc = ws.mam("send", "dee", "a\nb", "--enter")
    assert proc.returncode == 1 and "agent prompt failed" in proc.stderr and "not an active named agent" in proc.stderr
    assert typed(ws, "west", "w1:p1") == ""


def test_confirm_on_herdr_reads_its_own_state(ws: Workspace) -> None:
    herdr(ws, cid="working")
    # herdr's fake never starts a turn: the state it lists stays idle, so no turn started.
    proc = ws.mam("send", "ann", "hello", "--enter", "--confirm", "1", "--json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["delivered"] is False
    assert json.loads(proc.stdout)["confirmation"] == "no turn started: ann is still idle"
    # An agent already working shows no new turn: working is no sign that it took the text. mam says so.
    proc = ws.mam("send", "cid", "more", "--confirm", "1", "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["delivered"] is None and doc["state_after"] == "working"
    assert doc["confirmation"].startswith("cid was already working when the text was sent: no state of it can show")
    assert "it was typed, but cannot be confirmed" in proc.stderr
    proc = ws.mam("send", "cid", "more", "--confirm", "1")
    assert proc.returncode == 1 and "delivered: unconfirmed (cid was already working" in proc.stdout
    assert typed(ws, "east", "w1:p3") == "moremore"


def wait(ws: Workspace, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = ws.mam("wait", *args, "--json")
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


def test_wait_on_several_herdr_agents_asks_each_server_once_a_round(ws: Workspace) -> None:
    herdr(ws, bob="working", dee="blocked")
    before = listings(ws)
    code, doc, err = wait(ws, "ann", "bob", "cid", "dee", "--until", "idle,done", "--timeout", "1.2")
    assert code == 1 and not doc["reached"] and doc["mode"] == "all"
    assert [(a["name"], a["reached"], a["session"]["state"]) for a in doc["agents"]] == [
        ("ann", True, "idle"), ("bob", False, "working"), ("cid", True, "idle"), ("dee", False, "blocked")]
    # Three agents on east, one on west: each server listed once a round, however many of its agents wait.
    asked = listings(ws) - before
    assert doc["polls"] >= 2 and asked == {"east": doc["polls"], "west": doc["polls"]}
    assert "bob: working" in err and "dee: blocked" in err
    code, doc, err = wait(ws, "bob", "dee", "ann", "--until", "idle", "--any")
    assert code == 0 and doc["reached"] and doc["polls"] == 1
    assert [a["reached"] for a in doc["agents"]] == [False, False, True]
    code, doc, _ = wait(ws, "ann", "cid", "--until", "idle", "--all")
    assert code == 0 and doc["reached"] and doc["until"] == ["idle"]
    # One name: the document of one agent, as before.
    code, doc, _ = wait(ws, "ann", "--until", "idle", "--any")
    assert code == 0 and doc["name"] == "ann" and "agents" not in doc
    # The state changes while it waits: herdr lists bob idle after a moment.
    waiting = subprocess.Popen([sys.executable, "-m", "mam", "wait", "bob", "dee", "--until", "idle,blocked",
                                "--timeout", "60", "--json"], env=ws.env, cwd=ws.root, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    time.sleep(1.5)
    ws.herdr.set_agents("east", [{"agent": "claude", "agent_status": "idle", "cwd": "/repo", "name": "bob",
                                  "pane_id": "w1:p2", "terminal_id": "term_2"}])
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert [a["session"]["state"] for a in json.loads(out)["agents"]] == ["idle", "blocked"]


def test_wait_for_all_ends_when_one_is_gone_and_for_any_waits_on(ws: Workspace) -> None:
    herdr(ws, bob="working")
    ws.herdr.stop("west")
    code, _, err = wait(ws, "bob", "dee", "--until", "idle", "--timeout", "30")
    assert code == 1 and "herdr server west is down" in err
    code, doc, err = wait(ws, "dee", "bob", "--until", "idle", "--any", "--timeout", "1")
    assert code == 1 and "timed out" in err and doc["agents"][0]["session"]["state"] == "unknown"
    code, _, err = wait(ws, "dee", "--until", "idle", "--any", "--timeout", "30")
    assert code == 1 and "down" in err
    assert len(ws.herdr.server_starts()) == 2 and not ws.herdr.running("west")  # never started by a wait


def test_zellij_pastes_several_lines_as_one(zj: ZellijKit, ws: Workspace, tmp_path: Path) -> None:
    log = tmp_path / "read.log"
    zj.start("zz")
    proc = ws.mam("spawn", "rec", "--agent", "claude", "--server", "zz", "--command", sys.executable, "--",
                  RECORDER, str(log))
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 30
    while {s["name"]: s for s in ws.mam_json("status")["sessions"]}["rec"]["state"] not in ("idle", "done"):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    proc = ws.mam("send", "rec", "one\ntwo\nthree", "--enter", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["lines"] == 3
    deadline = time.monotonic() + 30
    while not (log.exists() and log.read_bytes().endswith((b"\r", b"\n")) and END in log.read_bytes()):
        assert time.monotonic() < deadline, log.read_bytes() if log.exists() else b""
        time.sleep(0.1)
    # zellij brackets the paste for a program that asked (the recorder did); Enter is byte 13 (the fake's FIFO
    # turns it into a newline, as a terminal's ICRNL would).
    assert log.read_bytes() in (START + b"one\ntwo\nthree" + END + b"\r", START + b"one\ntwo\nthree" + END + b"\n")
    if zj.kind == "fake":  # the fake records its calls: one paste, no characters typed one line at a time
        calls = [json.loads(line)["argv"] for line in (zj.socket_dir / "fake-calls.jsonl").read_text().splitlines()]
        assert [c[3] for c in calls if c[3:4] in (["paste"], ["write-chars"])] == ["paste"]


def test_tmux_pastes_from_stdin_in_one_call_and_leaves_no_buffer_when_it_fails(fake_runner: FakeRunner) -> None:
    """The text goes on stdin, never in an argument; a paste that failed (the pane went) deletes its buffer."""
    text = "first line; #{pane_id}\nsecond $(id) line;"
    agent, ctx = Agent(name="a", pane_id="%3"), CallContext(timeout=5, env={})
    fake_runner.answer(["tmux", "-N", "-L", "s1"], 0)  # -N: never starts the server
    assert TmuxBackend().send_text("s1", agent, text, True, ctx).ok
    (argv,), (stdin,) = fake_runner.calls, fake_runner.stdins
    assert stdin == text.encode() and not any(text in word or "second" in word for word in argv)
    buffer = argv[argv.index("load-buffer") + 2]
    assert buffer.startswith("mam-send-") and argv[argv.index("load-buffer"):] == (
        "load-buffer", "-b", buffer, "-", ";", "paste-buffer", "-p", "-d", "-b", buffer, "-t", "%3", ";",
        "send-keys", "-t", "%3", "Enter")
    fake_runner.calls.clear()
    fake_runner.stdins.clear()
    fake_runner.answer(["tmux", "-N", "-L", "s1", "-u", "load-buffer"], 1, stderr="can't find pane: %3\n")
    result = TmuxBackend().send_text("s1", agent, text, False, ctx)
    assert not result.ok and result.message == "tmux paste-buffer failed"
    buffer = fake_runner.calls[0][fake_runner.calls[0].index("load-buffer") + 2]
    assert fake_runner.calls[1][-3:] == ("delete-buffer", "-b", buffer) and fake_runner.stdins[1] is None
    # One line goes as keys, in the argument, as it always did.
    fake_runner.calls.clear()
    assert TmuxBackend().send_text("s1", agent, "one line", False, ctx).ok
    assert fake_runner.calls[-1][5:] == ("send-keys", "-l", "-t", "%3", "--", "one line")
