"""How an agent ended is a fact everywhere (issue 33): finished, failed, killed, stopped or lost, shown by
`status` (WHY and --json), `peek` and `wait` as soon as tmux can tell, and `restore --all` starts again only
what failed, was killed or was lost."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Callable

import pytest
import yaml

from conftest import Tmux, Workspace

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _spawn(ws: Workspace, server: str, name: str, command: str) -> None:
    ws.mam_json("spawn", name, "--server", server, "--command", command)


def _pane_dead(tmux: Tmux, server: str, name: str) -> bool:
    shown = tmux.run(server, "list-panes", "-t", f"={name}:", "-F", "#{pane_dead}", check=False)
    return shown.returncode == 0 and shown.stdout.strip() == "1"


def _until(check: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.fixture
def fleet(ws: Workspace, tmux: Tmux) -> str:
    """Six agents on one real tmux server: one finishes (exit 0), one fails (exit 3, a KeyError last), one is
    killed by SIGKILL, one is stopped with `mam stop`, two still run."""
    server = tmux.name()
    _spawn(ws, server, "fin", "sh -c 'echo working; sleep 1; echo finished OK'")
    _spawn(ws, server, "bad", "sh -c 'echo loading; sleep 1; echo \"KeyError: model\"; exit 3'")
    for name in ("kil", "stp", "run1", "run2"):
        _spawn(ws, server, name, "sleep 600")
    ws.mam_json("stop", "stp")
    pid = tmux.run(server, "list-panes", "-t", "=kil:", "-F", "#{pane_pid}").stdout.strip()
    os.kill(int(pid), signal.SIGKILL)
    for name in ("fin", "bad", "kil"):
        _until(lambda name=name: _pane_dead(tmux, server, name))
    return server


def test_wait_until_done_succeeds_on_an_agent_that_finished(ws: Workspace, tmux: Tmux) -> None:
    """The issue's own case: a job that exits 0 is done, not dead."""
    server = tmux.name()
    _spawn(ws, server, "job1", "sh -c 'echo working; sleep 2; echo finished OK'")
    proc = ws.mam("wait", "job1", "--until", "idle,done", "--timeout", "30", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["reached"] is True
    assert doc["session"]["end"] == "finished"
    assert doc["session"]["exit_status"] == 0
    assert doc["session"]["last_output"][-1] == "finished OK"


def test_each_end_shows_in_status_peek_wait_and_restore(ws: Workspace, tmux: Tmux, fleet: str) -> None:
    doc = ws.mam_json("status")
    sessions = {s["name"]: s for s in doc["sessions"]}
    ends = {name: s["end"] for name, s in sessions.items()}
    assert ends == {"fin": "finished", "bad": "failed", "kil": "killed", "stp": "stopped", "run1": None,
                    "run2": None}
    for name in ("fin", "bad", "kil", "stp"):
        assert sessions[name]["ended_at"] is not None, name
    assert sessions["run1"]["ended_at"] is None
    assert sessions["bad"]["exit_status"] == 3 and sessions["bad"]["last_output"][-1] == "KeyError: model"
    assert sessions["kil"]["exit_signal"] == 9
    assert sessions["fin"]["exit_status"] == 0
    # Seen at once, not only once `reconcile --apply` wrote it: the registry still says running.
    rows = {r["name"]: r for r in yaml.safe_load(ws.registry.read_text())["sessions"]}
    assert rows["bad"]["status"] == "running" and "exit_status" not in rows["bad"]

    table = ws.mam("status", env={**ws.env, "COLUMNS": "400"}).stdout
    lines = {line.split()[0]: line for line in table.splitlines() if line.strip()}
    assert "finished: fin exited with status 0" in lines["fin"]
    assert "failed: bad exited with status 3; its last output:" in lines["bad"]
    assert "KeyError: model" in lines["bad"]
    assert "killed: kil was killed by signal 9" in lines["kil"]
    assert "stopped: stp was stopped by `mam stop`" in lines["stp"]
    assert "not running: its server lists no live pane" not in table

    peek = ws.mam("peek", "bad")
    assert peek.returncode == 1
    assert "bad exited with status 3; its last output:" in peek.stderr and "KeyError: model" in peek.stderr
    peek = ws.mam("peek", "kil")
    assert peek.returncode == 1 and "kil was killed by signal 9" in peek.stderr

    waited = ws.mam("wait", "fin", "--until", "done", "--timeout", "10")
    assert waited.returncode == 0 and waited.stdout.startswith("fin: finished (fin exited with status 0"), waited.stdout
    failed = ws.mam("wait", "bad", "--until", "done", "--timeout", "10")
    assert failed.returncode == 1 and "bad exited with status 3" in failed.stderr

    plan = ws.mam_json("restore", "--all", "--dry-run")
    steps = {s["name"]: s for s in plan["agents"]}
    assert steps["fin"]["outcome"] == "skipped" and steps["fin"]["reason"] == "finished"
    assert steps["bad"]["outcome"] == "would_restore"
    assert steps["kil"]["outcome"] == "would_restore"
    assert "stp" not in steps or steps["stp"]["outcome"] == "skipped"
    assert not {"run1", "run2"} & {n for n, s in steps.items() if s["outcome"] == "would_restore"}

    tmux.run(fleet, "kill-server")  # the agents that ran die with their server: lost; the stopped one stays so
    ends = {s["name"]: s["end"] for s in ws.mam_json("status")["sessions"]}
    assert ends["run1"] == ends["run2"] == "lost" and ends["stp"] == "stopped"


def test_reconcile_restore_never_starts_a_finished_agent_again(ws: Workspace, tmux: Tmux) -> None:
    """`reconcile --apply --restore` writes the end to the row, and the restore after it leaves what finished."""
    server = tmux.name()
    _spawn(ws, server, "fin", "sh -c 'sleep 1; echo done here; exit 0'")
    _spawn(ws, server, "bad", "sh -c 'sleep 1; echo broken; exit 2'")
    _until(lambda: _pane_dead(tmux, server, "fin") and _pane_dead(tmux, server, "bad"))
    doc = ws.mam_json("reconcile", "--apply", "--restore")
    assert doc["restore"]["counts"]["restored"] == 1, doc["restore"]
    rows = {r["name"]: r for r in yaml.safe_load(ws.registry.read_text())["sessions"]}
    assert rows["fin"]["status"] == "terminated" and rows["fin"]["exit_status"] == 0
    assert rows["bad"].get("restore_count") == 1
    assert not rows["fin"].get("restore_count")
