"""The skills: SKILL.md front matter, `mam skills install`, and each script end to end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import Tmux, Workspace

SKILLS = Path(__file__).resolve().parent.parent / "skills"
NAMES = ["multi-agent-mux-monitor", "multi-agent-mux-spawn", "multi-agent-mux-status"]


def script(ws: Workspace, skill: str, name: str, *args: str, env: dict[str, str] | None = None,
           ) -> subprocess.CompletedProcess[str]:
    run_env = dict(env or ws.env)
    run_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{run_env['PATH']}"  # where `mam` is
    return subprocess.run([str(ws.root / ".agents" / "skills" / skill / "scripts" / name), *args], env=run_env,
                          cwd=ws.root, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
def installed(ws: Workspace) -> Workspace:
    proc = ws.mam("skills", "install")
    assert proc.returncode == 0, proc.stderr
    return ws


def test_skill_front_matter() -> None:
    assert sorted(p.name for p in SKILLS.iterdir()) == NAMES
    for name in NAMES:
        text = (SKILLS / name / "SKILL.md").read_text()
        assert text.startswith("---\n")
        meta = yaml.safe_load(text.split("---\n")[1])
        assert meta["name"] == name and len(meta["description"]) > 40


def test_install_into_another_dest(ws: Workspace) -> None:
    proc = ws.mam("skills", "install", "--dest", str(ws.root / ".claude" / "skills"))
    assert proc.returncode == 0
    assert sorted(p.name for p in (ws.root / ".claude" / "skills").iterdir()) == NAMES
    assert os.access(ws.root / ".claude/skills/multi-agent-mux-spawn/scripts/spawn.sh", os.X_OK)


def test_herdr_skills_end_to_end(installed: Workspace) -> None:
    ws = installed
    env = {**ws.env, "MAM_SERVER": "team"}
    proc = script(ws, "multi-agent-mux-spawn", "spawn.sh", "coder-1", "claude", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["session"]["live"] == "alive"
    (ws.herdr.session_dir("team") / "screen-coder-1.txt").write_text("all tests pass\n")
    proc = script(ws, "multi-agent-mux-spawn", "read.sh", "coder-1", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "all tests pass\n"
    status = json.loads(script(ws, "multi-agent-mux-status", "status.sh", env=env).stdout)
    assert status["sessions"][0]["live"] == "alive"
    report = json.loads(script(ws, "multi-agent-mux-monitor", "reconcile.sh", env=env).stdout)
    assert report["drifts"] == [] and report["confirmed"] is True
    proc = script(ws, "multi-agent-mux-spawn", "stop.sh", "coder-1", env=env)
    assert json.loads(proc.stdout)["status"] == "stopped"
    starts = ws.herdr.server_starts()
    assert len(starts) == 1  # only spawn started one; the query scripts never do


def test_status_script_never_starts_a_server(installed: Workspace) -> None:
    ws = installed
    ws.write_registry("sessions:\n  - {name: a, server: cold, status: running}\n")
    status = json.loads(script(ws, "multi-agent-mux-status", "status.sh").stdout)
    assert status["servers"][0]["state"] == "down"
    proc = script(ws, "multi-agent-mux-spawn", "read.sh", "a", "cold")
    assert proc.returncode == 1 and "server_not_running" in proc.stderr
    assert ws.herdr.server_starts() == []


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_tmux_skills_end_to_end(installed: Workspace, tmux: Tmux) -> None:
    ws = installed
    server = tmux.name()
    env = {**ws.env, "MAM_BACKEND": "tmux", "MAM_SERVER": server}
    # tmux has no agent kinds of its own: spawn starts the agent's executable, here a stand-in on PATH
    bin_dir = ws.root / "bin"
    bin_dir.mkdir()
    (bin_dir / "codex").write_text("#!/bin/sh\necho codex stand-in ready\nexec sleep 600\n")
    (bin_dir / "codex").chmod(0o755)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    proc = script(ws, "multi-agent-mux-spawn", "spawn.sh", "helper", "codex", env=env)
    assert proc.returncode == 0, proc.stderr
    import time
    deadline = time.monotonic() + 10
    text = ""
    while "ready" not in text and time.monotonic() < deadline:
        text = script(ws, "multi-agent-mux-spawn", "read.sh", "helper", env=env).stdout
        time.sleep(0.1)
    assert "codex stand-in ready" in text
    tmux.run(server, "kill-session", "-t", "=helper")
    report = json.loads(script(ws, "multi-agent-mux-monitor", "reconcile.sh", env=env).stdout)
    assert [(d["class"], d["name"]) for d in report["drifts"]] == [("A", "helper")]
    applied = json.loads(script(ws, "multi-agent-mux-monitor", "reconcile.sh", "--apply", env=env).stdout)
    assert applied["applied"] is True
    status = json.loads(script(ws, "multi-agent-mux-status", "status.sh", env=env).stdout)
    assert status["sessions"][0]["status"] == "terminated"
