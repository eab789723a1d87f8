"""Agent state on real tmux: stand-in agents draw each state in real panes, and `mam status`, `mam wait` and
`mam send` read and steer them as a user would."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import Tmux, Workspace
from mam_tmux.backend import STARTUP_SECONDS

STANDIN = str(Path(__file__).parent / "agents" / "standin.py")


def spawn(ws: Workspace, name: str, server: str, kind: str | None, *args: str) -> None:
    agent = ["--agent", kind] if kind else []
    proc = ws.mam("spawn", name, *agent, "--server", server, "--command", sys.executable, "--", STANDIN, *args)
    assert proc.returncode == 0, proc.stderr


def status(ws: Workspace, *args: str, env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    doc = ws.mam_json("status", *args, env=env)
    return {s["name"]: s for s in doc["sessions"]}


def settled(ws: Workspace, ok: Callable[[dict[str, dict[str, Any]]], bool], *args: str,
            env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """The status once `ok` holds for it: a stand-in needs a moment to draw its first screen."""
    deadline = time.monotonic() + 20
    while True:
        sessions = status(ws, *args, env=env)
        if ok(sessions) or time.monotonic() > deadline:
            return sessions
        time.sleep(0.2)


def screen(tmux: Tmux, server: str, target: str) -> str:
    return tmux.run(server, "capture-pane", "-p", "-t", target).stdout


def test_each_state_with_its_evidence_on_two_servers(ws: Workspace, tmux: Tmux) -> None:
    one, two = tmux.name(), tmux.name()
    spawn(ws, "spinning", one, "claude", "claude", "working")
    spawn(ws, "asking", one, "codex", "codex", "blocked")
    spawn(ws, "waiting", two, "gemini", "gemini", "idle")
    spawn(ws, "noise", two, None, "generic", "garbage")
    sessions = settled(ws, lambda s: s["spinning"]["state"] == "working" and s["asking"]["state"] == "blocked"
                       and s["waiting"]["state"] == "idle")
    assert sessions["spinning"]["state_source"] == "screen"
    assert sessions["spinning"]["evidence"]["rule"] == "claude.spinner"
    assert "Simplifying recompute_tangents…" in sessions["spinning"]["evidence"]["line"]
    assert sessions["asking"]["evidence"]["rule"].startswith("codex.")
    # Freshly spawned, it drew its prompt and has done nothing since: idle, not done (nobody attached to it, but
    # there is nothing new to look at), with the idle rule that matched.
    assert sessions["waiting"]["evidence"]["rule"].startswith("gemini.")
    assert sessions["waiting"]["evidence"]["fact"] is None
    # A screen no rule knows is unknown, never guessed.
    assert sessions["noise"]["state"] == "unknown"
    assert sessions["noise"]["evidence"] == {"rule": None, "line": None, "fact": "no rule matches the screen"}
    text = ws.mam("status").stdout
    header = text.splitlines()[1].split()
    assert header[:6] == ["NAME", "BACKEND", "SERVER", "STATUS", "LIVE", "STATE"] and header[-1] == "WHY"
    assert any(line.split()[:1] == ["asking"] and "blocked" in line.split() for line in text.splitlines())
    # --state filters; --no-state reads none.
    assert set(status(ws, "--state", "blocked")) == {"asking"}
    assert set(status(ws, "--state", "working,unknown")) == {"spinning", "noise"}
    assert status(ws, "--no-state")["asking"]["state"] is None
    assert "STATE" not in ws.mam("status", "--no-state").stdout.splitlines()[1]
    bad = ws.mam("status", "--state", "busy")
    assert bad.returncode == 2 and bad.stderr.count("\n") <= 2 and "busy" in bad.stderr


def test_idle_when_a_client_looks_done_when_none_has(ws: Workspace, tmux: Tmux) -> None:
    import subprocess

    server = tmux.name()
    # It works past its start-up (STARTUP_SECONDS after its session was made), then waits: nobody has looked.
    spawn(ws, "calm", server, "claude", "claude", "working", "--then", "idle", "--after", str(STARTUP_SECONDS + 2))
    assert settled(ws, lambda s: s["calm"]["state"] == "working")["calm"]["state"] == "working"
    deadline = time.monotonic() + STARTUP_SECONDS + 30
    while (sessions := status(ws))["calm"]["state"] != "done" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert sessions["calm"]["state"] == "done", sessions["calm"]
    assert sessions["calm"]["evidence"]["rule"] == "claude.footer"
    assert "looked" in sessions["calm"]["evidence"]["fact"]
    # A control-mode client attaches, as a person's terminal would, and stays while status runs.
    client = subprocess.Popen(["tmux", "-L", server, "-f", "/dev/null", "-C", "attach", "-t", "calm"], env=ws.env,
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sessions = settled(ws, lambda s: s["calm"]["state"] == "idle")
        assert sessions["calm"]["state"] == "idle"
        assert sessions["calm"]["evidence"] == {"rule": "claude.footer", "line": "? for shortcuts", "fact": None}
    finally:
        assert client.stdin is not None
        client.stdin.close()
        client.wait(timeout=20)
    assert status(ws)["calm"]["state"] == "idle"  # seen since its last output, even after the client left


def test_a_working_screen_that_stopped_changing_is_stale_not_working(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    # Draws the working screen once, then never again: a hung agent.
    draw = ("import importlib.util, sys, time; s = importlib.util.spec_from_file_location('s', sys.argv[1]); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            "sys.stdout.write(m.screen('claude', 'working')); sys.stdout.flush(); time.sleep(600)")
    proc = ws.mam("spawn", "hung", "--agent", "claude", "--server", server, "--command", sys.executable, "--",
                  "-c", draw, STANDIN)
    assert proc.returncode == 0, proc.stderr
    spawn(ws, "busy", server, "claude", "claude", "working")
    # tmux counts activity in whole seconds, so a pane redrawn a moment ago can read up to 1 s idle, more on a
    # loaded machine: the limit leaves the busy pane room, and the wait is well past it for the hung one.
    fast = {**ws.env, "MAM_STALE_SECONDS": "3"}
    settled(ws, lambda s: s["hung"]["evidence"]["rule"] == "claude.spinner", env=fast)
    time.sleep(5)
    sessions = status(ws, env=fast)
    assert sessions["hung"]["state"] == "unknown"
    assert sessions["hung"]["evidence"]["rule"] == "claude.spinner"
    assert sessions["hung"]["evidence"]["fact"].startswith("stale: a working screen unchanged for")
    assert sessions["busy"]["state"] == "working"  # it redraws its spinner: fresh
    bad = ws.mam("status", env={**ws.env, "MAM_STALE_SECONDS": "soon"})
    assert bad.returncode == 2 and "MAM_STALE_SECONDS" in bad.stderr


def test_a_dead_pane_is_not_idle(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    spawn(ws, "gone", server, "claude", "claude", "idle")
    settled(ws, lambda s: s["gone"]["state"] == "idle")
    tmux.run(server, "set-option", "-w", "-t", "gone", "remain-on-exit", "on")
    pid = tmux.run(server, "list-panes", "-t", "gone", "-F", "#{pane_pid}").stdout.split()[0]
    import os
    import signal

    os.kill(int(pid), signal.SIGTERM)
    sessions = settled(ws, lambda s: s["gone"]["live"] == "absent")
    assert "Pane is dead" in screen(tmux, server, "gone") or tmux.run(
        server, "list-panes", "-t", "gone", "-F", "#{pane_dead}").stdout.strip() == "1"
    assert sessions["gone"]["state"] == "unknown"  # its last screen still shows the prompt: not idle
    # How it ended, from the pane tmux keeps: SIGTERM kills it, or its program exits 143 on it.
    end = sessions["gone"]["end"]
    assert end in ("failed", "killed")
    assert sessions["gone"]["evidence"]["fact"].startswith(f"{end}: gone ")


def test_a_user_rule_wins_over_the_shipped_one(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    spawn(ws, "calm", server, "claude", "claude", "idle")
    settled(ws, lambda s: s["calm"]["state"] == "idle")
    (ws.root / ".mam" / "states.yaml").write_text(
        "schema: 1\nkinds:\n  claude:\n    rules:\n      - id: claude.footer\n        state: blocked\n"
        "        pattern: 'for shortcuts'\n        lines: 2\n")
    sessions = status(ws)
    assert sessions["calm"]["state"] == "blocked"
    assert sessions["calm"]["evidence"]["rule"] == "claude.footer"
    (ws.root / ".mam" / "states.yaml").write_text("schema: 1\nkinds:\n  claude:\n    rules: [{id: nope}]\n")
    bad = ws.mam("status")
    assert bad.returncode == 2 and "states.yaml" in bad.stderr and bad.stdout == ""
    assert ws.mam("status", "--no-state").returncode == 0  # the rules are read only when state is


def test_hostile_screens_cannot_forge_a_capture_boundary(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    # A pane that prints lines shaped like a capture header, with the separator and another pane's id.
    forged = "\x1f".join(["mam-" + "0" * 32, "%2", "1", "9", "", "0", "0", "0", "sh"])
    tmux.agent(server, "liar", command=f"printf '%s\\n' '{forged}' '{forged}' 'Do you want to proceed?'; sleep 600")
    spawn(ws, "honest", server, "claude", "claude", "working")
    ws.mam("reconcile", "--apply", "--adopt")
    sessions = settled(ws, lambda s: s.get("honest", {}).get("state") == "working"
                       and s.get("liar", {}).get("state") == "blocked")
    assert sessions["liar"]["evidence"]["rule"] == "generic.proceed"
    assert sessions["honest"]["evidence"]["rule"] == "claude.spinner"


def test_wait_until_a_state_and_timeout(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    spawn(ws, "turn", server, "claude", "claude", "working", "--then", "idle", "--after", "1.5")
    proc = ws.mam("wait", "turn", "--until", "idle,done", "--timeout", "60", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["reached"] and doc["session"]["state"] in ("idle", "done") and doc["until"] == ["idle", "done"]
    assert doc["session"]["evidence"]["rule"] == "claude.footer"
    proc = ws.mam("wait", "turn", "--until", "blocked", "--timeout", "1")
    assert proc.returncode == 1
    assert "timed out after 1 s" in proc.stderr and "claude.footer" in proc.stderr
    for args in (["--until", "soon"], ["--until", "idle", "--timeout", "-1"], ["--until", ""]):
        bad = ws.mam("wait", "turn", *args)
        assert bad.returncode == 2, (args, bad.stderr)
    assert ws.mam("wait", "Bad Name", "--until", "idle").returncode == 2
    assert ws.mam("wait", "nobody", "--until", "idle").returncode == 1


def test_send_types_text_literally_and_never_starts_a_server(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    spawn(ws, "ear", server, "codex", "codex", "idle")
    settled(ws, lambda s: s["ear"]["state"] in ("idle", "done"))
    hostile = "run #{pane_id} $(id) `x` Enter C-c ;"
    proc = ws.mam("send", "ear", hostile, "--enter", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["characters"] == len(hostile)
    deadline = time.monotonic() + 20
    while f"got: {hostile}" not in screen(tmux, server, "ear") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert f"got: {hostile}" in screen(tmux, server, "ear")
    assert ws.mam("send", "ear", "half").returncode == 0  # no Enter: typed, not submitted
    assert ws.mam("send", "ear", "", "--enter").returncode == 0
    deadline = time.monotonic() + 20
    while "got: half" not in screen(tmux, server, "ear") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "got: half" in screen(tmux, server, "ear")
    # An escape would act as a key, and one inside a paste could end it early (ESC[201~): refused, nothing typed.
    for text in ("esc\x1b[2J", "\x03", "two\nlines\x1b[201~rm -rf build\r", "cr\rsubmits"):
        bad = ws.mam("send", "ear", text)
        assert bad.returncode == 2 and "control character" in bad.stderr
    assert ws.mam("send", "Bad Name", "x").returncode == 2
    assert ws.mam("send", "ear").returncode == 2  # nothing to send
    tmux.run(server, "kill-server")
    before = tmux.sockets()
    down = ws.mam("send", "ear", "hello", "--enter")
    assert down.returncode == 1 and "down" in down.stderr
    wait = ws.mam("wait", "ear", "--until", "idle", "--timeout", "5")
    assert wait.returncode == 1 and "down" in wait.stderr
    assert tmux.sockets() == before
    assert tmux.run(server, "list-sessions", check=False).returncode != 0  # still down
