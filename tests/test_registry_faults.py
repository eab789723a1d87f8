"""The registry under faults, through the real command line: a read-only filesystem, a full disk, a lock left
by a dead process. A write that cannot finish leaves the old bytes and says so in one line; the next one that
can finish does."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Workspace, fill, mounted_tmpfs

ROWS = "version: 1\nsessions:\n  - {name: ghost, server: gone, status: running, team: blue}\n"


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A small filesystem of its own (64 KiB), so a test can fill it or make it read-only."""
    yield from mounted_tmpfs(tmp_path, "64k")


def _workspace_on(ws: Workspace, root: Path) -> dict[str, str]:
    (root / ".mam").mkdir()
    (root / ".mam" / "agent-sessions.yaml").write_text(ROWS)
    return {**ws.env, "MAM_WORKSPACE": str(root)}


def _assert_refused_write(ws: Workspace, env: dict[str, str], registry: Path, before: bytes) -> None:
    proc = ws.mam("reconcile", "--apply", "--json", env=env)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith(f"mam: {registry}") and "Traceback" not in proc.stderr, proc.stderr
    # the audit line could not be written either: said, after the error the user must read first
    assert "mam: warning: the audit line for reconcile was not written" in proc.stderr.splitlines()[-1], proc.stderr
    assert json.loads(proc.stdout)["error"]["code"] == "operation_failed"
    assert registry.read_bytes() == before
    assert [p.name for p in registry.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_a_read_only_filesystem_refuses_the_write_and_keeps_the_file(ws: Workspace, tmpfs: Path) -> None:
    env = _workspace_on(ws, tmpfs)
    registry = tmpfs / ".mam" / "agent-sessions.yaml"
    before = registry.read_bytes()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True, timeout=20)
    doc = ws.mam_json("reconcile", env=env)  # a report still works: it writes nothing
    assert [d["name"] for d in doc["drifts"]] == ["ghost"]
    _assert_refused_write(ws, env, registry, before)
    proc = ws.mam("spawn", "new-one", "--agent", "claude", "--server", "s1", env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert not [c for c in ws.herdr.calls() if "agent" in c["argv"] and "start" in c["argv"]]  # never started
    assert registry.read_bytes() == before


def test_a_full_disk_refuses_the_write_and_keeps_the_file(ws: Workspace, tmpfs: Path) -> None:
    env = _workspace_on(ws, tmpfs)
    registry = tmpfs / ".mam" / "agent-sessions.yaml"
    (registry.parent / "agent-sessions.yaml.lock").touch()
    before = registry.read_bytes()
    filler = fill(tmpfs)
    _assert_refused_write(ws, env, registry, before)
    filler.unlink()  # space again: the same command now writes
    doc = ws.mam_json("reconcile", "--apply", env=env)
    assert doc["applied"] is True
    assert "status: terminated" in registry.read_text() or '"status": "terminated"' in registry.read_text()


def test_a_lock_left_by_a_killed_process_does_not_block_the_next_write(ws: Workspace) -> None:
    ws.write_registry(ROWS)
    lock = ws.registry.with_name("agent-sessions.yaml.lock")
    pid = os.fork()
    if pid == 0:  # the child takes the lock and waits to be killed, as a writer killed mid-write would
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"held")
        signal.pause()
        os._exit(0)
    try:
        while not lock.exists() or lock.read_bytes() != b"held":
            pass
        with pytest.raises(BlockingIOError):  # held for real
            fcntl.flock(os.open(lock, os.O_RDWR), fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    doc = ws.mam_json("reconcile", "--apply")
    assert doc["applied"] is True
    assert "terminated" in ws.registry.read_text()
