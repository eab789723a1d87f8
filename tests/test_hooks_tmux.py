"""The hook source on real tmux: a stand-in agent runs the hook command `mam hooks install` wrote (Claude Code's
Stop hook: `mam report idle`), and `mam status` takes its word while it holds, then falls back to the screen
when the screen changes after it, when it grows old, or when the pane is restarted."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from conftest import Tmux, Workspace

STANDIN = str(Path(__file__).parent / "agents" / "standin.py")


def installed_stop_hook(ws: Workspace) -> str:
    """The command Claude Code would run at the end of a turn, as `mam hooks install` wrote it."""
    assert ws.mam("hooks", "install", "--agent", "claude").returncode == 0
    settings = json.loads((Path(ws.env["HOME"]) / ".claude" / "settings.json").read_text())
    command: str = settings["hooks"]["Stop"][0]["hooks"][0]["command"]
    return command


def mam_on_path(ws: Workspace, folder: Path) -> None:
    """A `mam` that runs this checkout, first on the PATH the agents get (the hook runs `mam` by name)."""
    folder.mkdir()
    script = folder / "mam"
    script.write_text(f"#!/bin/sh\nPYTHONPATH={os.environ.get('PYTHONPATH', '')} exec {sys.executable} -m mam \"$@\"\n")
    script.chmod(0o755)
    ws.env["PATH"] = f"{folder}{os.pathsep}{ws.env['PATH']}"


def entry(ws: Workspace, name: str, **env: str) -> dict[str, Any]:
    doc = ws.mam_json("status", env={**ws.env, **env} if env else None)
    found: dict[str, Any] = next(s for s in doc["sessions"] if s["name"] == name)
    return found


def until(ws: Workspace, name: str, source: str, **env: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        found = entry(ws, name, **env)
        if found["state_source"] == source or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def spawn(ws: Workspace, tmux: Tmux, name: str, server: str, hook: str) -> str:
    proc = ws.mam("spawn", name, "--agent", "claude", "--server", server, "--env", "PATH", "--command",
                  sys.executable, "--", STANDIN, "claude", "garbage", "--hook", hook)
    assert proc.returncode == 0, proc.stderr
    pane: str = ws.mam_json("ls", "--server", server)["agents"][0]["pane_id"]
    return pane


def test_the_hook_decides_until_the_screen_changes_after_it(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    mam_on_path(ws, tmp_path / "bin")
    server = tmux.name()
    pane = spawn(ws, tmux, "hooked", server, installed_stop_hook(ws))
    found = until(ws, "hooked", "hook")
    # The screen matches no rule (it would say unknown): the agent's own word decides, with its age; idle (done
    # once it has written past its start-up with nobody attached, as an idle screen would be).
    assert found["state"] in ("idle", "done") and found["state_source"] == "hook", found
    assert 0 <= found["state_age"] < 20 and "its own hook reported idle" in found["evidence"]["fact"]
    report = json.loads((ws.root / ".mam" / "reports" / "hooked.json").read_text())
    assert report["panes"] == {"TMUX_PANE": pane}
    # A report older than the freshness limit is set aside.
    time.sleep(1.2)
    old = entry(ws, "hooked", MAM_HOOK_FRESH="1")
    assert old["state_source"] == "screen" and "older than 1 s" in old["evidence"]["fact"]
    # Output after the report (beyond the grace of a redraw) is a new turn the hook did not speak of.
    time.sleep(2.5)
    tmux.run(server, "send-keys", "-t", pane, "a new prompt", "Enter")
    changed = until(ws, "hooked", "screen")
    assert changed["state"] == "unknown" and "screen changed" in changed["evidence"]["fact"], changed
    # The agent reports again: its word holds again.
    tmux.run(server, "send-keys", "-t", pane, "!hook", "Enter")
    assert until(ws, "hooked", "hook")["state"] in ("idle", "done")


def test_a_restarted_pane_sets_the_report_aside(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    mam_on_path(ws, tmp_path / "bin")
    server = tmux.name()
    pane = spawn(ws, tmux, "again", server, installed_stop_hook(ws))
    assert until(ws, "again", "hook")["state"] in ("idle", "done")
    # The same pane (same id), a new process that has not reported.
    tmux.run(server, "respawn-pane", "-k", "-t", pane, sys.executable, STANDIN, "claude", "garbage")
    found = until(ws, "again", "screen")
    assert found["state_source"] == "screen" and "restarted" in found["evidence"]["fact"], found


def test_the_agents_title_is_read_in_the_same_call(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    proc = ws.mam("spawn", "titled", "--agent", "gemini", "--server", server, "--command", sys.executable, "--",
                  STANDIN, "generic", "garbage", "--title", "✋  Action Required (work)")
    assert proc.returncode == 0, proc.stderr
    found = until(ws, "titled", "title")
    assert found["state"] == "blocked" and found["evidence"]["rule"] == "gemini.title", found
    assert "the screen says unknown" in found["evidence"]["fact"]
