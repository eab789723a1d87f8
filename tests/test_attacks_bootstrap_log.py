"""A server log mam refuses to open (a planted symbolic link) fails the bootstrap before any server starts.

Before, tmux and zellij opened the log only after starting the server: the refusal came with the server
already running, unrecorded, and the next bootstrap said "already running".
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import Tmux, Workspace

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _plant(ws: Workspace, tmp_path: Path, log_name: str) -> tuple[Path, Path]:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    logs = ws.root / ".mam" / "logs"
    logs.mkdir(parents=True)
    (logs / log_name).symlink_to(victim)
    return logs / log_name, victim


def _refused(proc: subprocess.CompletedProcess[str], log: Path) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"mam: {log}: ") and "symbolic link" in first, proc.stderr


@needs_tmux
def test_a_refused_tmux_log_starts_no_server(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server = tmux.name()
    log, victim = _plant(ws, tmp_path, f"tmux-{server}.log")
    proc = ws.mam("--backend", "tmux", "bootstrap", "--server", server)
    _refused(proc, log)
    assert victim.read_text() == "precious\n"
    # What a user checks: no server answers on that socket name.
    ls = subprocess.run(["tmux", "-L", server, "-N", "ls"], env=tmux.env, capture_output=True, text=True,
                        timeout=20, stdin=subprocess.DEVNULL)
    assert ls.returncode == 1 and ls.stdout == "", (ls.stdout, ls.stderr)
    assert server not in tmux.sockets()


def test_a_refused_zellij_log_starts_no_session(ws: Workspace, tmp_path: Path) -> None:
    env = {**ws.env, "ZELLIJ_SOCKET_DIR": str(tmp_path / "zellij-sock")}
    log, victim = _plant(ws, tmp_path, "zellij-S.log")
    proc = ws.mam("--backend", "zellij", "bootstrap", "--server", "S", env=env)
    _refused(proc, log)
    assert victim.read_text() == "precious\n"
    ls = subprocess.run(["zellij", "list-sessions", "-n"], env=env, capture_output=True, text=True, timeout=20,
                        stdin=subprocess.DEVNULL)
    assert ls.returncode == 1 and ls.stderr.strip() == "No active zellij sessions found.", (ls.stdout, ls.stderr)


def test_a_refused_herdr_log_starts_no_server(ws: Workspace, tmp_path: Path) -> None:
    log, victim = _plant(ws, tmp_path, "herdr-S.log")
    proc = ws.mam("--backend", "herdr", "bootstrap", "--server", "S")
    _refused(proc, log)
    assert victim.read_text() == "precious\n"
    assert not ws.herdr.running("S") and ws.herdr.server_starts() == []
