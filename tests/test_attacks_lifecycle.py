"""Races of spawn, bootstrap and reconcile on real tmux servers: a live agent is never recorded dead.

The many-round cases are marked `slow` (deselect them with `-m "not slow"`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import Tmux, Workspace

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

STAND_IN = "sh -c 'exec sleep 600'"


def _popen(ws: Workspace, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "mam", *args], env=env or ws.env, cwd=ws.root,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _all_at_once(ws: Workspace, argvs: list[list[str]]) -> list[tuple[int, str]]:
    procs = [_popen(ws, *argv) for argv in argvs]
    results = []
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        results.append((proc.returncode, err))
    return results


def _rows(ws: Workspace) -> dict[str, dict[str, object]]:
    data = yaml.safe_load(ws.registry.read_text()) or {}
    return {r["name"]: r for r in data.get("sessions") or []}


def _alive(tmux: Tmux, server: str, name: str) -> bool:
    return tmux.run(server, "has-session", "-t", "=" + name, check=False).returncode == 0


@pytest.mark.slow
def test_four_spawns_of_one_name_leave_the_winner_running(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    ws.mam_json("bootstrap", "--server", server)
    for round_ in range(15):
        name = f"dup{round_}"
        results = _all_at_once(ws, [["spawn", name, "--server", server, "--command", STAND_IN]] * 4)
        codes = sorted(code for code, _ in results)
        assert codes == [0, 2, 2, 2], (round_, results)
        for code, err in results:
            if code:  # a loser says why, in one line, and names what is in the way
                assert err.startswith(f"mam: {name} is already "), err
        row = _rows(ws)[name]
        assert row["status"] == "running", (round_, row, results)
        assert _alive(tmux, server, name)
        assert "terminated_at" not in row and "terminated_reason" not in row


def test_a_spawn_refused_for_a_starting_row_leaves_that_row_alone(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    ws.mam_json("bootstrap", "--server", server)
    # Another spawn of `busy` is under way (or gave no clear answer): its row is `starting`, its agent not yet up.
    ws.write_registry("version: 1\nsessions:\n- " + json.dumps({
        "name": "busy", "backend": "tmux", "server": server, "status": "starting", "spawn_token": "theirs",
        "created_at": "2026-01-01T00:00:00Z"}) + "\n")
    before = ws.registry.read_bytes()
    proc = ws.mam("spawn", "busy", "--server", server, "--command", STAND_IN)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"mam: busy is already registered as starting on tmux server {server}")
    assert ws.registry.read_bytes() == before
    assert not _alive(tmux, server, "busy")


def _parallel_on_a_down_server(ws: Workspace, tmux: Tmux, command: str) -> None:
    for round_ in range(20):
        server = tmux.name()
        if command == "spawn":
            argvs = [["spawn", f"a{i}", "--server", server, "--command", STAND_IN] for i in range(10)]
        else:
            argvs = [["bootstrap", "--server", server]] * 10
        results = _all_at_once(ws, argvs)
        assert [code for code, _ in results] == [0] * 10, (round_, [err for code, err in results if code])
        sessions = tmux.run(server, "list-sessions", "-F", "#{session_name}").stdout.split()
        if command == "spawn":
            assert sorted(sessions) == sorted(["_mam_keepalive", *(f"a{i}" for i in range(10))])
            rows = _rows(ws)
            assert all(rows[f"a{i}"]["status"] == "running" for i in range(10))
        else:
            assert sessions == ["_mam_keepalive"]
        tmux.run(server, "kill-server")


@pytest.mark.slow
def test_ten_spawns_onto_a_down_server_all_succeed(ws: Workspace, tmux: Tmux) -> None:
    _parallel_on_a_down_server(ws, tmux, "spawn")


@pytest.mark.slow
def test_ten_bootstraps_of_a_down_server_all_succeed(ws: Workspace, tmux: Tmux) -> None:
    _parallel_on_a_down_server(ws, tmux, "bootstrap")


def _tmux_children(pid: int) -> list[list[str]]:
    """The argv of every direct child of `pid` (the tmux clients a mam command is waiting on)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(argv)
    return found


def test_reconcile_apply_leaves_a_row_re_spawned_after_its_listing_alone(ws: Workspace, tmux: Tmux) -> None:
    live, frozen = tmux.name(), tmux.name()
    ws.mam_json("spawn", "r1", "--server", live, "--command", STAND_IN)
    ws.mam_json("spawn", "x1", "--server", frozen, "--command", STAND_IN)
    tmux.run(live, "kill-session", "-t", "=r1")  # r1 dies behind mam's back
    pid = int(tmux.run(frozen, "display-message", "-p", "#{pid}").stdout)
    os.kill(pid, signal.SIGSTOP)  # the listing of `frozen` hangs until SIGCONT
    reconcile = _popen(ws, "reconcile", "--apply", "--json", env={**ws.env, "MAM_TIMEOUT": "30"})
    try:
        deadline = time.monotonic() + 20
        while not any(frozen in argv for argv in _tmux_children(reconcile.pid)):
            assert time.monotonic() < deadline and reconcile.poll() is None, "reconcile never asked the server"
            time.sleep(0.01)
        # The listing of `live` (a few ms, more on a loaded machine) has come back: reconcile planned r1 as drift A.
        time.sleep(3.0)
        assert any(frozen in argv for argv in _tmux_children(reconcile.pid))  # still waiting on `frozen`
        # Meanwhile the user settles r1 and spawns it again.
        assert ws.mam_json("stop", "r1")["status"] == "terminated"
        respawned = ws.mam_json("spawn", "r1", "--server", live, "--command", STAND_IN)["session"]
        assert respawned["live"] == "alive"
    finally:
        os.kill(pid, signal.SIGCONT)
    out, err = reconcile.communicate(timeout=60)
    assert reconcile.returncode == 0, err
    row = _rows(ws)["r1"]
    assert row["status"] == "running", row
    assert _alive(tmux, live, "r1")
    doc = json.loads(out)
    assert [(d["class"], d["name"]) for d in doc["drifts"]] == [("A", "r1")]  # what it saw, then
    assert doc["applied"] is True and doc["written"] == 0
    text = ws.mam("reconcile")  # and the registry agrees with the server now
    assert "no drift" in text.stdout, text.stdout
