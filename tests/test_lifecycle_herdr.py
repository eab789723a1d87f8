"""`mam spawn` and `mam stop` on herdr, over the fake herdr."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

from conftest import Workspace


def test_spawn_on_a_stopped_session_starts_it_once_then_the_agent(ws: Workspace) -> None:
    env = {**ws.env, "CLAUDECODE": "1", "HERDR_PANE_ID": "w9:p9", "CLAUDE_CONFIG_DIR": "/cfg"}
    proc = ws.mam("spawn", "coder-1", "--json", "--agent", "claude", "--server", "team", "--cwd", str(ws.root),
                  "--", "--model", "opus", env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    session = doc["session"]
    assert (session["status"], session["live"], session["agent"]) == ("running", "alive", "claude")
    assert session["pane_id"] == "w1:p1" and session["cwd"] == str(ws.root)
    starts = ws.herdr.server_starts()
    assert len(starts) == 1 and starts[0]["argv"] == ["--session", "team", "server"]
    assert "CLAUDECODE" not in starts[0]["env"] and "HERDR_PANE_ID" not in starts[0]["env"]
    assert starts[0]["env"]["CLAUDE_CONFIG_DIR"] == "/cfg"
    calls = [c["argv"] for c in ws.herdr.calls()]
    row = yaml.safe_load(ws.registry.read_text())["sessions"][0]
    # claude starts with the conversation id mam chose (its kind's new_session), kept for restore
    # herdr waits for the agent at most --timeout ms ($MAM_HERDR_START_TIMEOUT, default 30 s, as herdr's own)
    assert ["--session", "team", "agent", "start", "coder-1", "--kind", "claude", "--pane", "w1:p1", "--timeout",
            "30000", "--", "--session-id", row["agent_session"], "--model", "opus"] in calls
    assert any(c[:4] == ["--session", "team", "workspace", "create"] for c in calls)
    assert row["status"] == "running" and row["server"] == "team" and row["pane"]["id"] == "w1:p1"

    ws.mam_json("spawn", "coder-2", "--agent", "codex", "--server", "team")
    assert len(ws.herdr.server_starts()) == 1  # up now: not started again


def test_herdr_refuses_what_it_cannot_start(ws: Workspace) -> None:
    proc = ws.mam("spawn", "Upper", "--agent", "claude", "--server", "team", "--json")
    assert proc.returncode == 2 and "herdr cannot keep the agent name 'Upper'" in proc.stderr  # before any row
    proc = ws.mam("spawn", "x1", "--command", "sleep 60", "--server", "team", "--json")
    assert proc.returncode == 1 and "--command is for tmux and zellij" in proc.stderr
    rows = yaml.safe_load(ws.registry.read_text())["sessions"]
    assert {r["status"] for r in rows} == {"terminated"}  # registered, then marked as never started
    proc = ws.mam("spawn", "y1", "--agent", "nosuchkind", "--server", "team")
    assert proc.returncode == 2 and "unknown agent kind" in proc.stderr


def test_stop_closes_the_pane(ws: Workspace) -> None:
    ws.mam_json("spawn", "coder-1", "--agent", "claude", "--server", "team")
    doc = ws.mam_json("stop", "coder-1")
    assert doc["status"] == "stopped"
    assert ["--session", "team", "pane", "close", "w1:p1"] in [c["argv"] for c in ws.herdr.calls()]
    status = ws.mam_json("status")
    assert status["sessions"][0]["status"] == "stopped" and status["sessions"][0]["live"] == "absent"
    assert ws.herdr.running("team")


def test_stop_on_a_down_session_is_terminated(ws: Workspace) -> None:
    ws.write_registry("sessions:\n  - {name: gone, server: dead, status: running}\n")
    doc = ws.mam_json("stop", "gone")
    assert doc["status"] == "terminated"
    assert ws.herdr.server_starts() == []
    row = yaml.safe_load(ws.registry.read_text())["sessions"][0]
    assert row["status"] == "terminated" and "down" in row["terminated_reason"]


def test_stop_of_an_unknown_name_says_what_to_do(ws: Workspace) -> None:
    proc = ws.mam("stop", "nobody", "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["error"]["hint"].startswith("`mam --backend herdr stop --force nobody --server mam`")


def test_env_values_reach_a_herdr_agent_through_its_pane_not_its_command(ws: Workspace, tmp_path: Path) -> None:
    """`--env NAME` on herdr: the value goes in the new pane's environment (`workspace create --env`), which the
    shell herdr types the agent into passes on; the typed line and the registry never hold it."""
    bin_dir, seen = tmp_path / "bin", tmp_path / "seen"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text(f'#!/bin/sh\nprintf "%s|%s" "$MY_TOKEN" "$ONLY_HERE" > {seen}\n')
    claude.chmod(0o755)
    value = "s3cret $(id) ; 'x'"
    path = f"{ws.env['PATH']}:{bin_dir}"
    # A server that has neither variable: the pane can get MY_TOKEN only by --env.
    ws.herdr.start("team", env={**ws.env, "PATH": path})
    env = {**ws.env, "MY_TOKEN": value, "ONLY_HERE": "mam's own", "PATH": path}
    proc = ws.mam("spawn", "coder-1", "--agent", "claude", "--server", "team", "--env", "MY_TOKEN", env=env)
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 10
    while not seen.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen.read_text() == f"{value}|"  # and a variable of mam's own, not passed, is not the pane's
    calls = [c["argv"] for c in ws.herdr.calls()]
    create = next(c for c in calls if c[2:4] == ["workspace", "create"])
    assert create[create.index("--env") + 1] == f"MY_TOKEN={value}"
    start = next(c for c in calls if c[2:4] == ["agent", "start"])
    assert not any("s3cret" in word for word in start)
    row = yaml.safe_load(ws.registry.read_text())["sessions"][0]
    assert row["spec"]["env_names"] == ["MY_TOKEN"] and "s3cret" not in ws.registry.read_text()
