"""Agent state, `mam wait` and `mam send` on herdr (its own `agent_status`, through the fake) and zellij (stand-in
agents in the fake's panes, read from `dump-screen`); and the pieces: tmux's capture parser, one capture call per
server, and how a capture becomes a state."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import FAKES, Workspace
from mam.agents.agentstate import read_capture
from mam.kinds.library import load_library
from mam.plugin.records import Agent, CallContext, Failure, PaneCapture
from mam.testing import FakeRunner
from mam_tmux.backend import SEP, TmuxBackend, parse_captures

pytest_plugins = ["mam.testing.pytest_plugin"]
STANDIN = str(Path(__file__).parent / "agents" / "standin.py")


def sessions(ws: Workspace, *args: str) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in ws.mam_json("status", *args)["sessions"]}


# herdr: the listing's own agent_status.

HERDR_REGISTRY = "version: 1\nsessions:\n" + "".join(
    f"  - {{name: {n}, server: live, status: running, agent: claude}}\n"
    for n in ("a-working", "a-blocked", "a-idle", "a-done", "a-unknown"))


def herdr_agents(status: str | None = None) -> list[dict[str, Any]]:
    return [{"agent": "claude", "agent_status": status or name.split("-")[1], "cwd": "/repo", "name": name,
             "pane_id": f"w1:p{i}", "terminal_id": f"term_{i}"}
            for i, name in enumerate(("a-working", "a-blocked", "a-idle", "a-done", "a-unknown"), 1)]


def test_herdr_reports_its_own_five_states(ws: Workspace) -> None:
    ws.write_registry(HERDR_REGISTRY)
    ws.herdr.start("live")
    ws.herdr.set_agents("live", herdr_agents())
    found = sessions(ws)
    for name, entry in found.items():
        state = name.split("-")[1]
        assert (entry["state"], entry["state_source"]) == (state, "backend")
        assert entry["evidence"] == {"field": "agent_status", "value": state}
    assert set(sessions(ws, "--state", "blocked,done")) == {"a-blocked", "a-done"}
    # No screen was read: herdr's listing carries the state, and nothing else was called.
    assert {" ".join(c["argv"][2:4]) for c in ws.herdr.calls() if c["argv"][-1:] != ["server"]} == {"agent list"}


def test_herdr_wait_and_send(ws: Workspace) -> None:
    ws.write_registry(HERDR_REGISTRY)
    ws.herdr.start("live")
    ws.herdr.set_agents("live", herdr_agents())
    proc = ws.mam("wait", "a-done", "--until", "done", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["session"]["evidence"]["value"] == "done"
    proc = ws.mam("wait", "a-blocked", "--until", "idle", "--timeout", "1")
    assert proc.returncode == 1 and "agent_status=blocked" in proc.stderr
    assert ws.mam("send", "a-idle", "fix the -x flag; then #{y}", "--enter").returncode == 0
    typed = (ws.herdr.session_dir("live") / "typed-w1_p3.txt").read_text()
    assert typed == "fix the -x flag; then #{y}<Enter>"
    sends = [c["argv"] for c in ws.herdr.calls() if "send-text" in c["argv"]]
    # exactly the text: herdr types a `--` given after the pane id (`-- fix ...`)
    assert sends == [["--session", "live", "pane", "send-text", "w1:p3", "fix the -x flag; then #{y}"]]
    ws.herdr.stop("live")
    starts = len(ws.herdr.server_starts())
    down = ws.mam("send", "a-idle", "hello")
    assert down.returncode == 1 and "down" in down.stderr
    assert ws.mam("wait", "a-idle", "--until", "idle", "--timeout", "2").returncode == 1
    assert len(ws.herdr.server_starts()) == starts and not ws.herdr.running("live")
    assert sessions(ws)["a-idle"]["evidence"]["fact"] == "not running: its server is down"


def test_wait_and_send_say_how_to_start_a_missing_agent_again(ws: Workspace) -> None:
    """An agent its server does not list: restore for a row with a launch spec, spawn for one without (an
    adopted or hand-written row, which restore cannot start)."""
    ws.write_registry("sessions:\n"
                      "  - {name: handmade, server: live, status: running}\n"
                      f"  - {{name: spawned, server: live, status: running, spec: {{kind: claude, args: [],"
                      f" cwd: {ws.root}}}}}\n"
                      # older than launch specs, but its kind and directory are enough for restore
                      f"  - {{name: older, server: live, status: running, agent: claude, pane: {{cwd: {ws.root}}}}}\n")
    ws.herdr.start("live")
    for name, hint in (("handmade", "hint: `mam --backend herdr spawn handmade --server live ...` starts it again"),
                       ("spawned", "hint: `mam restore spawned` starts it again from its launch spec"),
                       ("older", "hint: `mam restore older` starts it again from its launch spec")):
        for args in (("wait", name, "--until", "idle", "--timeout", "1"), ("send", name, "hello")):
            proc = ws.mam(*args)
            assert proc.returncode == 1 and f"{name} is not running on herdr server live" in proc.stderr
            assert hint in proc.stderr, proc.stderr


def test_wait_and_send_ask_which_server_for_a_name_on_two(ws: Workspace) -> None:
    ws.write_registry("sessions:\n  - {name: twin, server: east, status: running}\n"
                      "  - {name: twin, server: west, status: running}\n")
    for args in (("wait", "twin", "--until", "idle", "--timeout", "1"), ("send", "twin", "hello")):
        proc = ws.mam(*args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.splitlines() == ["mam: twin is registered on several servers (herdr server east, herdr "
                                            "server west)", "hint: pass --server NAME"]
    assert ws.herdr.server_starts() == []


# zellij: stand-ins in the fake's panes, read from dump-screen.

def zspawn(ws: Workspace, name: str, kind: str, *args: str) -> None:
    proc = ws.mam("spawn", name, "--agent", kind, "--server", "zz", "--command", sys.executable, "--", STANDIN,
                  *args, env={**ws.env, "MAM_BACKEND": "zellij"})
    assert proc.returncode == 0, proc.stderr


def settled(ws: Workspace, names: dict[str, str]) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + 20
    while True:
        found = sessions(ws)
        if all(found[n]["state"] == s for n, s in names.items()) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


@pytest.fixture
def zellij_session(ws: Workspace) -> Iterator[str]:
    """The fake zellij session `zz` the stand-ins run in; killed at the end, and its panes' programs with it."""
    yield "zz"
    subprocess.run([str(FAKES / "zellij"), "kill-session", "zz"], env=ws.env, capture_output=True, timeout=30)


def test_zellij_states_from_its_screens_then_wait_and_send(ws: Workspace, zellij_session: str) -> None:
    zspawn(ws, "spin", "claude", "claude", "working")
    zspawn(ws, "ask", "gemini", "gemini", "blocked")
    zspawn(ws, "calm", "codex", "codex", "idle")
    zspawn(ws, "noise", "claude", "generic", "garbage")
    found = settled(ws, {"spin": "working", "ask": "blocked", "calm": "idle", "noise": "unknown"})
    assert [found[n]["state"] for n in ("spin", "ask", "calm", "noise")] == ["working", "blocked", "idle", "unknown"]
    assert found["spin"]["evidence"]["rule"] == "claude.spinner" and found["spin"]["state_source"] == "screen"
    assert found["ask"]["evidence"]["rule"].startswith("gemini.")
    # zellij cannot tell whether anyone looked: idle, never done.
    assert found["calm"]["evidence"]["rule"].startswith("codex.") and found["calm"]["evidence"]["fact"] is None
    assert found["noise"]["evidence"]["fact"] == "no rule matches the screen"
    proc = ws.mam("wait", "spin", "--until", "blocked", "--timeout", "1")
    assert proc.returncode == 1 and "claude.spinner" in proc.stderr
    assert ws.mam("wait", "ask", "--until", "blocked").returncode == 0
    refused = ws.mam("send", "calm", "-rf ; #{x}")
    assert refused.returncode == 2 and "No such option" in refused.stderr  # an option, to mam: after -- instead
    assert ws.mam("send", "calm", "--enter", "--", "-rf ; #{x}").returncode == 0
    deadline = time.monotonic() + 20
    zellij = Path(ws.env["ZELLIJ_SOCKET_DIR"])
    dump = ""
    while "got: -rf ; #{x}" not in dump and time.monotonic() < deadline:
        pane = next(s for s in sessions(ws).values() if s["name"] == "calm")["pane_id"]
        dump = (zellij / f"screen-zz-0-{pane}.out").read_text(errors="replace")  # the server's first run
        time.sleep(0.1)
    assert "got: -rf ; #{x}" in dump
    calls = [json.loads(line)["argv"] for line in (zellij / "fake-calls.jsonl").read_text().splitlines()]
    assert ["--session", "zz", "action", "write-chars", "--pane-id", f"terminal_{pane}", "--", "-rf ; #{x}"] in calls
    # A pane whose program ended is held by zellij: not listed, so not running, never idle.
    zellij_kill = ws.mam("stop", "calm", env={**ws.env, "MAM_BACKEND": "zellij"})
    assert zellij_kill.returncode == 0
    assert sessions(ws)["calm"]["state"] == "unknown"


# The pieces.

def test_tmux_capture_parser_refuses_what_does_not_split_exactly() -> None:
    nonce = "mam-" + "ab" * 16
    head = SEP.join(["%1", "0", "", "", "100", "0", "90", "1", "80", "3", "4242", "✳ Claude Code", "claude"])
    text = f"{nonce}{SEP}{head}\nline one\n❯ \n\n"
    captured = parse_captures(text, nonce, ["%1"], now=130.0)
    assert captured["%1"] == PaneCapture(text="line one\n❯ \n\n", dead=False, dead_status=None, command="claude",
                                         idle_seconds=30.0, seen=False, below_cursor=1, pid=4242,
                                         title="✳ Claude Code")
    # A hidden cursor (no row) or a row past the pane's height says nothing of where the cursor is.
    for cursor, height in (("", "3"), ("3", "3")):
        odd = SEP.join(["%1", "0", "", "", "100", "0", "90", cursor, "80", height, "1", "", "claude"])
        assert parse_captures(f"{nonce}{SEP}{odd}\nx\n", nonce, ["%1"], now=130.0)["%1"].below_cursor is None
    dead = SEP.join(["%1", "1", "3", "", "100", "1", "90", "", "80", "3", "7", "host", "bash"])
    assert parse_captures(f"{nonce}{SEP}{dead}\n", nonce, ["%1"], now=100.0)["%1"].dead_status == "exit status 3"
    for bad, panes in ((text, ["%1", "%2"]), (text, ["%2"]), ("junk" + text, ["%1"]),
                       (f"{nonce}{SEP}%1{SEP}zz\n", ["%1"])):
        with pytest.raises(ValueError):
            parse_captures(bad, nonce, panes, now=0.0)
    # With the server's clock first (another host's may differ from this one's), idleness is on its clock.
    clocked = parse_captures(f"{nonce}{SEP}400{SEP}{head}\nline\n", nonce, ["%1"], now=130.0)
    assert clocked["%1"].idle_seconds == 300.0
    # A command holding an escaped newline stays in its header.
    tricky = SEP.join(["%1", "0", "", "", "100", "1", "90", "0", "80", "1", "7", "t\\\nx\\\x1f", "a\\\nb"])
    assert parse_captures(f"{nonce}{SEP}{tricky}\nscreen\n", nonce, ["%1"], 100.0)["%1"].command == "a\nb"
    # The title anyone's program can set is escaped as the command is: it cannot break the header.
    assert parse_captures(f"{nonce}{SEP}{tricky}\nscreen\n", nonce, ["%1"], 100.0)["%1"].title == "t\nx\x1f"


def test_tmux_captures_every_pane_of_a_server_in_one_call(fake_runner: FakeRunner) -> None:
    agents = tuple(Agent(name=f"a{i}", pane_id=f"%{i}") for i in range(1, 6))
    answer = TmuxBackend().capture_panes("s1", agents, CallContext(timeout=1, env={}))
    assert len(fake_runner.calls) == 1  # the fake answers nothing, so the one call fails, and is not retried
    argv = fake_runner.calls[0]
    assert argv[:5] == ("tmux", "-N", "-L", "s1", "-u")
    assert sum(word.startswith("capture-pane ") for word in argv) == 5 and argv.count("display-message") == 5
    assert isinstance(answer, Failure)
    # A pane gone since the listing stops tmux's sequence: then one call per pane, and the gone one left out.
    fake_runner.answer(["tmux"], 1, "", "can't find pane: %3\n")
    answer = TmuxBackend().capture_panes("s1", agents, CallContext(timeout=1, env={}))
    assert answer == {} and len(fake_runner.calls) == 1 + 1 + 5


LIBRARY = load_library(None)


@pytest.mark.parametrize(("capture", "state", "fact"), [
    (PaneCapture(text="✻ Thinking… (3s)\n", idle_seconds=2.0), "working", None),
    (PaneCapture(text="✻ Thinking… (3s)\n", idle_seconds=30.0), "unknown", "stale"),
    (PaneCapture(text="✻ Thinking… (3s)\n"), "working", None),  # no activity clock: not judged
    (PaneCapture(text="  ? for shortcuts\n", seen=False), "done", "no client"),
    (PaneCapture(text="  ? for shortcuts\n", seen=True), "idle", None),
    (PaneCapture(text="  ? for shortcuts\n", dead=True, dead_status="exit status 1"), "unknown",
     "the pane's program has ended"),
    (PaneCapture(text="hello\n"), "unknown", "no rule matches"),
    (PaneCapture(text=None), "unknown", "no screen"),
    (None, "unknown", "not captured"),
])
def test_a_capture_becomes_a_state(capture: PaneCapture | None, state: str, fact: str | None) -> None:
    found = read_capture(LIBRARY, ("claude",), capture)
    assert found.state == state
    assert found.evidence is not None
    if fact is None:
        assert found.evidence["fact"] is None
    else:
        assert fact in str(found.evidence["fact"])
    if capture is not None and capture.dead:
        assert found.evidence["rule"] == "pane_dead" and found.evidence["line"] == "exit status 1"


def test_the_kind_comes_from_the_row_else_the_pane_command() -> None:
    screen = PaneCapture(text="  ? for shortcuts\n", command="claude", seen=True)
    assert read_capture(LIBRARY, (None, "python3"), screen).state == "idle"  # from pane_current_command
    assert read_capture(LIBRARY, (None, None), PaneCapture(text="  ? for shortcuts\n")).state == "unknown"


@pytest.mark.parametrize(("capture", "state", "fact"), [
    (PaneCapture(text="Python 3.11\n>>> \n", idle_seconds=5.0, seen=True, below_cursor=0), "idle", None),
    (PaneCapture(text="Python 3.11\n>>> \n", idle_seconds=1.0, seen=True, below_cursor=0), "unknown",
     "a prompt at the cursor, but its screen changed 1 s ago"),
    (PaneCapture(text="me@box:~/repo$ \n", idle_seconds=5.0, seen=True), "idle", None),
    (PaneCapture(text="me@box:~/repo$ \n"), "unknown", "does not say when"),
    (PaneCapture(text="total 12\nsrc\nbuild\n", idle_seconds=5.0, seen=True), "unknown", "no rule matches"),
])
def test_a_plain_commands_prompt_is_idle_once_its_screen_is_quiet(capture: PaneCapture, state: str,
                                                                   fact: str | None) -> None:
    """A program mam has no kind for (`--command python3`) is read with the generic rules: a prompt at the
    cursor and no output for PROMPT_QUIET seconds is `idle`; a screen no rule explains stays `unknown`."""
    found = read_capture(LIBRARY, (None,), dataclasses.replace(capture, command="python3"))
    assert found.state == state, found
    assert found.evidence is not None
    assert found.evidence["fact"] is None if fact is None else fact in str(found.evidence["fact"])
    if state == "idle":
        assert found.evidence["rule"] == "generic.prompt"
