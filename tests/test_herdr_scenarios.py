"""The herdr backend's scenarios, each run twice through the `hd` fixture: on the fake and on the real herdr on
PATH (when mam supports its version; skipped otherwise, with the reason). The agents are the stand-in Claude
Code herdr detects (tests/agents/herdr/claude). A fake easier than herdr shows up here as a test that passes on
one and fails on the other."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import yaml
from herdr_kit import STANDIN_BIN, HerdrKit, _processes

from conftest import Workspace

S = "team"
MARKERS = {"CLAUDECODE": "1", "CLAUDE_CODE_SESSION_ID": "sess-123", "HERDR_PANE_ID": "w9:p9",
           "HERDR_SOCKET_PATH": "/tmp/elsewhere.sock", "TMUX": "/tmp/tmux-0/default,1,0"}
CONFIGURATION = {"CLAUDE_CONFIG_DIR": "/home/u/.claude-work", "MAM_CUSTOM_SETTING": "kept"}


def spawn(ws: Workspace, hd: HerdrKit, name: str, outcome: str = "ready", expect: int = 0) -> dict[str, Any]:
    """`mam spawn NAME --agent claude` of the stand-in, ending as `outcome` (see HerdrKit.standin)."""
    args = hd.standin(ws.root / f"{name}.log", ws.root / f"{name}.control", outcome)
    proc = ws.mam("spawn", name, "--json", "--agent", "claude", "--server", S, "--cwd", str(ws.root), "--", *args)
    assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
    doc: dict[str, Any] = json.loads(proc.stdout) if proc.stdout.strip() else {"stderr": proc.stderr}
    doc.setdefault("stderr", proc.stderr)
    return doc


def row(ws: Workspace, name: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = yaml.safe_load(ws.registry.read_text())["sessions"]
    return next(r for r in rows if r["name"] == name)


def entry(ws: Workspace, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in ws.mam_json("status")["sessions"] if s["name"] == name)
    return found


def state_becomes(ws: Workspace, hd: HerdrKit, name: str, state: str) -> None:
    hd.wait(lambda: entry(ws, name)["state"] == state, f"{name} never read {state}", limit=20)


def standins(ws: Workspace, name: str) -> list[int]:
    """The stand-in processes of agent `name` (its log path is in their command line)."""
    log = str(ws.root / f"{name}.log")
    return [pid for pid, argv in _processes(f"XDG_CONFIG_HOME={ws.env['XDG_CONFIG_HOME']}").items()
            if log in argv and any(a.startswith(str(STANDIN_BIN)) for a in argv)]


def test_status_down_up_and_unknown(ws: Workspace, hd: HerdrKit) -> None:
    ws.write_registry(f"version: 1\nsessions:\n  - {{name: a1, server: {S}, status: running, agent: claude}}\n")
    down = ws.mam_json("status")
    assert (down["servers"][0]["state"], down["sessions"][0]["live"]) == ("down", "absent")
    hd.start(S)
    up = ws.mam_json("status")
    assert (up["servers"][0]["state"], up["sessions"][0]["live"]) == ("up", "absent")
    # a socket that takes the connection and never answers: herdr's client waits, mam's time runs out
    hd.session_dir("mute").mkdir(parents=True)
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        mute.bind(str(hd.session_dir("mute") / "herdr.sock"))
        mute.listen(1)
        ws.write_registry("version: 1\nsessions:\n  - {name: a2, server: mute, status: running, agent: claude}\n")
        unknown = ws.mam_json("status", env={**ws.env, "MAM_TIMEOUT": "2"})
        assert (unknown["servers"][0]["state"], unknown["sessions"][0]["live"]) == ("unknown", "unknown")
    finally:
        mute.close()


def test_bootstrap_scrubs_markers_and_keeps_configuration(ws: Workspace, hd: HerdrKit) -> None:
    env = {**ws.env, **MARKERS, **CONFIGURATION}
    doc = ws.mam_json("bootstrap", "--server", "fresh", env=env)
    assert (doc["started"], doc["state"]) == (True, "up")
    raw = (Path("/proc") / str(hd.server_pid("fresh")) / "environ").read_bytes().split(b"\0")
    server_env = dict(item.decode().split("=", 1) for item in raw if b"=" in item)
    assert not set(MARKERS) & set(server_env)
    assert {k: server_env.get(k) for k in CONFIGURATION} == CONFIGURATION
    assert ws.mam_json("bootstrap", "--server", "fresh", env=env)["started"] is False


def test_queries_never_start_a_server(ws: Workspace, hd: HerdrKit) -> None:
    ws.write_registry(f"version: 1\nsessions:\n  - {{name: a1, server: {S}, status: running, agent: claude}}\n")
    for args in (("status",), ("ls", "--server", S), ("reconcile",), ("peek", "a1")):
        ws.mam(*args, "--json")
    assert not hd.running(S)
    assert _processes(hd.env_marker()) == {}


def test_spawn_through_agent_start_and_its_endings(ws: Workspace, hd: HerdrKit) -> None:
    ws.env["MAM_HERDR_START_TIMEOUT"] = "6"
    ready = spawn(ws, hd, "ready")
    assert ready["session"]["live"] == "alive" and ready["session"]["agent"] == "claude"
    listed = hd.agent(S, "ready")
    assert listed is not None and listed["agent"] == "claude" and listed["pane_id"] == row(ws, "ready")["pane"]["id"]
    blocked = spawn(ws, hd, "dialog", "blocked")  # herdr's agent_not_ready: it runs, at its dialog
    assert blocked["session"]["live"] == "alive"
    assert entry(ws, "dialog")["state"] == "blocked"
    exited = spawn(ws, hd, "gone", "exited", expect=1)
    assert "did not see gone ready within 6 s" in exited["stderr"]
    assert hd.agent(S, "gone") is None
    other = spawn(ws, hd, "other", "mismatch", expect=1)
    assert "herdr found another kind of agent in its pane" in other["stderr"]
    assert [a["agent"] for a in hd.agents(S) if a["pane_id"] not in (
        row(ws, "ready")["pane"]["id"], row(ws, "dialog")["pane"]["id"])] == ["codex"]


def test_state_is_herdrs_own_agent_status(ws: Workspace, hd: HerdrKit) -> None:
    spawn(ws, hd, "a1")
    state_becomes(ws, hd, "a1", "idle")
    for state in ("working", "blocked", "idle"):
        hd.set_state(S, "a1", ws.root / "a1.control", state)
        state_becomes(ws, hd, "a1", state)


def test_send_types_exactly_the_text(ws: Workspace, hd: HerdrKit) -> None:
    spawn(ws, hd, "a1")
    pane = row(ws, "a1")["pane"]["id"]
    log = ws.root / "a1.log"
    expected = ""
    for args, text in ((("hello there", "--enter"), "hello there<Enter>"), (("--", "--"), "--"),
                       (("--", "--session=x"), "--session=x"), (("--enter", "--", "one\ntwo"),
                                                                "\x1b[200~one\ntwo\x1b[201~<Enter>")):
        proc = ws.mam("send", "a1", *args)
        assert proc.returncode == 0, (args, proc.stderr)
        expected += text
        hd.wait(lambda want=expected: hd.received(S, pane, log) == want, f"{args}: got {hd.received(S, pane, log)!r}")
    assert hd.running(S) and not hd.running("x")


def test_a_blocked_agent_takes_only_an_answer(ws: Workspace, hd: HerdrKit) -> None:
    spawn(ws, hd, "a1")
    pane = row(ws, "a1")["pane"]["id"]
    hd.set_state(S, "a1", ws.root / "a1.control", "blocked")
    state_becomes(ws, hd, "a1", "blocked")
    refused = ws.mam("send", "a1", "go on", "--enter")
    assert refused.returncode == 1 and "a1 is blocked on a question" in refused.stderr
    answered = ws.mam("send", "a1", "--answer", "y", "--enter", "--json")
    assert answered.returncode == 0, answered.stderr
    hd.wait(lambda: hd.received(S, pane, ws.root / "a1.log") == "y<Enter>", "the answer arrived")


def test_peek_shows_the_bottom_of_what_the_agent_drew(ws: Workspace, hd: HerdrKit) -> None:
    spawn(ws, hd, "a1")
    pane = row(ws, "a1")["pane"]["id"]
    if hd.kind == "fake":  # the fake's screen of the pane: what the stand-in draws on the real one
        (hd.session_dir(S) / f"screen-{pane}.txt").write_text("● Done. The tests pass.\n\n" + "─" * 60
                                                               + "\n❯ \n" + "─" * 60 + "\n  ? for shortcuts\n")
    lines = ws.mam_json("peek", "a1", "--lines", "3")["lines"]
    assert len(lines) == 3 and lines[-1].strip() == "? for shortcuts", lines


def test_stop_closes_the_pane_and_its_program(ws: Workspace, hd: HerdrKit) -> None:
    spawn(ws, hd, "a1")
    assert len(standins(ws, "a1")) == 1
    assert ws.mam_json("stop", "a1")["status"] == "stopped"
    assert hd.agent(S, "a1") is None
    hd.wait(lambda: standins(ws, "a1") == [], "the stand-in still runs")
    assert entry(ws, "a1")["live"] == "absent" and hd.running(S)


def test_restore_after_the_server_died_gives_one_copy(ws: Workspace, hd: HerdrKit) -> None:
    spawn(ws, hd, "a1")
    hd.kill(S)
    assert ws.mam_json("status")["servers"][0]["state"] == "down"
    restored = ws.mam_json("restore", "a1")["agents"][0]
    assert restored["outcome"] == "restored", restored
    time.sleep(1)  # anything herdr resumes on its own has had its time
    assert [a.get("name") for a in hd.agents(S) if a.get("agent") == "claude"] == ["a1"]
    assert len(standins(ws, "a1")) == 1
    assert entry(ws, "a1")["live"] == "alive"


def test_reconcile_finds_drift_a_b_and_c(ws: Workspace, hd: HerdrKit) -> None:
    spawn(ws, hd, "gone")
    spawn(ws, hd, "back")
    made = hd.json("--session", S, "workspace", "create", "--cwd", str(ws.root), "--no-focus")
    stray = made["result"]["root_pane"]["pane_id"]
    args = hd.standin(ws.root / "stray.log", ws.root / "stray.control")
    assert hd.run("--session", S, "agent", "start", "stray", "--kind", "claude", "--pane", stray, "--timeout",
                  "20000", "--", *args).returncode == 0
    assert hd.run("--session", S, "pane", "close", row(ws, "gone")["pane"]["id"]).returncode == 0
    data = yaml.safe_load(ws.registry.read_text())
    next(r for r in data["sessions"] if r["name"] == "back")["status"] = "stopped"
    ws.write_registry(yaml.safe_dump(data))
    assert (row(ws, "gone")["status"], row(ws, "back")["status"]) == ("running", "stopped")
    drifts = {(d["class"], d["name"]) for d in ws.mam_json("reconcile")["drifts"]}
    assert drifts == {("A", "gone"), ("B", "stray"), ("C", "back")}
    ws.mam_json("reconcile", "--apply")
    assert (row(ws, "gone")["status"], row(ws, "back")["status"]) == ("terminated", "running")

