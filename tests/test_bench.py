"""The benchmarks still run: a smoke run of bench/run.py (few runs, few servers, few rows) into a temporary
folder. It checks that every part measures and reports, never how fast anything is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import clean_environ

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_the_benchmarks_run_and_mark_every_target(tmp_path: Path) -> None:
    env = clean_environ()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")])
    env["HOME"] = str(tmp_path / "home")  # the bench's tmux servers have private sockets; HOME is pinned too
    (tmp_path / "home").mkdir()
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--out", str(tmp_path)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    # 1: a target missed, which a smoke run may well do; but a benchmark that failed writes no results
    assert proc.returncode in (0, 1) and (tmp_path / "results.json").exists(), proc.stderr[-4000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results) >= {"startup", "tmux", "profile", "herdr", "registry", "state"}
    report = (tmp_path / "RESULTS.md").read_text()
    targets = [line for line in report.splitlines() if line.endswith(("| met |", "| **missed** |"))]
    remote = Path("/usr/sbin/sshd").exists() and shutil.which("ssh") is not None
    assert ("remote" in results) == remote  # the loopback-ssh benchmark runs wherever OpenSSH does
    assert len(targets) == 8 + remote, report
    assert (proc.returncode == 1) == any(line.endswith("| **missed** |") for line in targets)
    for section in ("## Start-up", "## tmux", "## herdr", "## Registry at scale", "Where the time goes",
                    "## Agent state"):
        assert section in report


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_the_top_benchmark_runs_the_view_in_a_terminal_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """bench/top_idle.py in small (2 servers of 2 agents, the view watched for 6 s): it reports, and the tmux
    servers and the view it started are gone after it."""
    env = clean_environ()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")])
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir()
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "top_idle.py"), "--servers", "2", "--agents", "2",
                           "--minutes", "0.1", "--every", "1", "--runs", "1"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "## mam top at scale: 4 agents on 2 tmux servers" in proc.stdout
    assert "| CPU of the view (% of one core, every thread) |" in proc.stdout
    assert "`mam --backend tmux status --json`, a whole process" in proc.stdout
    left = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=30).stdout
    assert "sleep 2147483647" not in left and "-L view -f /dev/null" not in left
