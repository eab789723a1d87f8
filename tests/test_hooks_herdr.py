"""The hook source on herdr (the fake, which runs the pane's program as herdr does): an agent that runs `mam report`
in its pane is identified by the `$HERDR_PANE_ID` herdr gives every pane it makes (herdr's src/pane.rs,
`apply_pane_launch_env`: the public pane id, the one `agent list` reports), and its word wins over herdr's own
`agent_status` while it holds."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from conftest import Workspace


def status_entry(ws: Workspace, name: str, env: dict[str, str]) -> dict[str, Any]:
    doc = ws.mam_json("status", env=env)
    found: dict[str, Any] = next(s for s in doc["sessions"] if s["name"] == name)
    return found


def test_a_herdr_agents_report_decides_over_herdrs_state(ws: Workspace, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mam = bin_dir / "mam"
    mam.write_text(f"#!/bin/sh\nPYTHONPATH={os.environ.get('PYTHONPATH', '')} exec {sys.executable} -m mam \"$@\"\n")
    claude = bin_dir / "claude"  # the agent: asks a question, says so through its hook, and waits
    claude.write_text("#!/bin/sh\necho 'Do you want to proceed?'\nmam report blocked\nexec sleep 600\n")
    for script in (mam, claude):
        script.chmod(0o755)
    env = {**ws.env, "PATH": f"{bin_dir}{os.pathsep}{ws.env['PATH']}"}
    ws.herdr.start("team", env=env)
    proc = ws.mam("spawn", "asker", "--agent", "claude", "--server", "team", env=env)
    assert proc.returncode == 0, proc.stderr
    try:
        _reported_blocked_then_stale(ws, env)
    finally:  # the agent ends with the test (the fake herdr's server going does not end its agents)
        ws.mam("stop", "asker", "--server", "team", env=env)


def _reported_blocked_then_stale(ws: Workspace, env: dict[str, str]) -> None:
    pane = ws.mam_json("ls", "--server", "team", env=env)["agents"][0]["pane_id"]
    reports = ws.root / ".mam" / "reports" / "asker.json"
    deadline = time.monotonic() + 20
    while not reports.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert json.loads(reports.read_text())["panes"] == {"HERDR_PANE_ID": pane}
    found = status_entry(ws, "asker", env)
    # herdr itself says idle (its fake, as herdr, cannot see the question): the agent's own word decides.
    assert (found["state"], found["state_source"]) == ("blocked", "hook"), found
    assert "its own hook reported blocked" in found["evidence"]["fact"]
    # Once the report is older than the freshness limit, herdr's state decides again.
    time.sleep(1.2)
    stale = status_entry(ws, "asker", {**env, "MAM_HOOK_FRESH": "1"})
    assert stale["state_source"] == "backend" and stale["state"] != "blocked", stale
