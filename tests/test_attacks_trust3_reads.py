"""Trust, third round (issue 20, items 1-4): what mam reads from a backend. A server mam cannot look at is
`unknown`, never `down`; a spawn in flight is no drift; a raw `\\r` in a pane's directory blinds nothing; and no
answer is read past $MAM_MAX_OUTPUT."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from sshd import Sshd

from conftest import FAKES, Tmux, Workspace

# The memory a mam process may take in these tests: far above what it needs, far below an unbounded read.
MEMORY_LIMIT = 1024 ** 3


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _mam(ws: Workspace, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """mam as a process with bounded memory: a read without a limit dies of it (or runs into its timeout)."""
    return subprocess.run([sys.executable, "-m", "mam", *args], env=env, cwd=ws.root, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL, preexec_fn=_bounded)


def _flooding(ws: Workspace, tmp_path: Path, backend: str, real: str, **plan: Any) -> dict[str, str]:
    """The faulty stand-in first on PATH as `backend`, flooding its stdout forever; the environment for mam."""
    bin_dir = tmp_path / "flood-bin"
    bin_dir.mkdir()
    shutil.copy(FAKES / "faulty", bin_dir / backend)
    plan_path = bin_dir / "plan.json"
    plan_path.write_text(json.dumps({"mode": "flood", "real": real, "log": str(tmp_path / "calls.jsonl"), **plan}))
    return {**ws.env, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "FAULTY_PLAN": str(plan_path), "MAM_BACKEND": backend, "MAM_TIMEOUT": "30", "MAM_MAX_OUTPUT": "1M"}


def _status_is_unknown_over_the_limit(ws: Workspace, env: dict[str, str]) -> None:
    proc = _mam(ws, "status", "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    [server] = doc["servers"]
    assert server["state"] == "unknown", server
    assert "more than 1048576 bytes" in server["error"]["message"], server
    assert "MAM_MAX_OUTPUT" in server["error"]["message"], server
    assert doc["sessions"][0]["status"] == "running"  # nothing recorded dead for it


def test_a_herdr_streaming_json_forever_is_unknown_over_the_output_limit(ws: Workspace, tmp_path: Path) -> None:
    ws.write_registry("version: 1\nsessions:\n  - {name: a1, backend: herdr, server: s1, status: running}\n")
    env = _flooding(ws, tmp_path, "herdr", str(FAKES / "herdr"), stdout='{"result":', chunk=" [")
    _status_is_unknown_over_the_limit(ws, env)


def test_a_tmux_printing_endlessly_is_unknown_over_the_output_limit(ws: Workspace, tmp_path: Path) -> None:
    ws.write_registry("version: 1\nsessions:\n  - {name: a1, backend: tmux, server: s1, status: running}\n")
    env = _flooding(ws, tmp_path, "tmux", shutil.which("tmux") or "/usr/bin/tmux", chunk="y\n")
    _status_is_unknown_over_the_limit(ws, env)


@pytest.mark.parametrize("value", ["0", "12", "-1", "1T", "x", "2G", "99999999999999999999"])
def test_a_bad_output_limit_is_refused(ws: Workspace, value: str) -> None:
    proc = ws.mam("status", env={**ws.env, "MAM_MAX_OUTPUT": value})
    assert proc.returncode == 2 and "MAM_MAX_OUTPUT" in proc.stderr, proc.stderr


def _rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in yaml.safe_load(ws.registry.read_text())["sessions"]}


def test_a_carriage_return_in_one_panes_directory_blinds_nothing(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    """tmux prints a pane's directory with its raw `\\r`: read with universal newlines, that split a record and
    the whole server's listing was refused (every agent `unknown`, new spawns left `starting`)."""
    server = tmux.name()
    odd = tmp_path / "d\rx"
    odd.mkdir()
    ws.mam_json("spawn", "plain", "--server", server, "--command", "sleep 600", "--cwd", str(tmp_path))
    ws.mam_json("spawn", "odd", "--server", server, "--command", "sleep 600", "--cwd", str(odd))
    tmux.run(server, "new-session", "-d", "-s", "mover", "-c", str(tmp_path), "sh")  # an agent that cd's there
    # printf makes the \r: typed raw, it would end the line
    tmux.run(server, "send-keys", "-t", "=mover:", "-l", "cd \"$(printf 'd\\rx')\"")
    tmux.run(server, "send-keys", "-t", "=mover:", "Enter")
    pid = tmux.run(server, "display", "-p", "-t", "=mover:", "#{pane_pid}").stdout.strip()
    deadline = time.monotonic() + 20
    while os.readlink(f"/proc/{pid}/cwd") != str(odd):
        assert time.monotonic() < deadline, "the shell did not cd"
        time.sleep(0.1)
    listed = ws.mam_json("ls", "--server", server)
    assert listed["server"]["state"] == "up", listed["server"]
    agents = {a["name"]: a for a in listed["agents"]}
    assert agents["odd"]["cwd"] == str(odd) and agents["mover"]["cwd"] == str(odd)
    assert agents["plain"]["cwd"] == str(tmp_path)
    status = ws.mam_json("status")
    assert status["servers"][0]["state"] == "up", status["servers"]
    assert {s["name"]: s["live"] for s in status["sessions"]} == {"plain": "alive", "odd": "alive"}
    ws.mam_json("spawn", "later", "--server", server, "--command", "sleep 600")
    assert _rows(ws)["later"]["status"] == "running"


def _slow_tmux(tmp_path: Path, env: dict[str, str], seconds: float) -> dict[str, str]:
    """A tmux that takes `seconds` to create a session (a slow or remote server), first on PATH."""
    bin_dir = tmp_path / "slow-bin"
    bin_dir.mkdir()
    real = shutil.which("tmux") or "/usr/bin/tmux"
    script = bin_dir / "tmux"
    script.write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = new-session ] && sleep {seconds}; done\n'
                      f'exec {real} "$@"\n')
    script.chmod(0o755)
    return {**env, "PATH": f"{bin_dir}:{env['PATH']}"}


def _wait_row(ws: Workspace, name: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        row = _rows(ws).get(name) if ws.registry.exists() else None
        if row is not None and row["status"] == status:
            return row
        assert time.monotonic() < deadline, row
        time.sleep(0.02)


def test_reconcile_leaves_a_spawn_in_flight_alone(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    """`mam spawn y &` then `reconcile --apply --restore` while tmux still creates y: the row was marked
    terminated ("absent"), restored into `duplicate session: y`, and a prune then dropped a live agent's row."""
    server = tmux.name()
    tmux.agent(server, "other")  # the server is up: the spawn's only slow step is creating its session
    env = {**_slow_tmux(tmp_path, ws.env, 3), "MAM_TIMEOUT": "20"}  # the window is wide, even under load
    spawn = subprocess.Popen([sys.executable, "-m", "mam", "spawn", "y", "--server", server, "--command",
                              "sleep 600", "--json"], env=env, cwd=ws.root, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_row(ws, "y", "starting")
        doc = ws.mam_json("reconcile", "--apply", "--restore", env=env)
        assert [d for d in doc["drifts"] if d["name"] == "y"] == [], doc["drifts"]
        assert [a for a in doc["restore"]["agents"] if a["name"] == "y"] == [], doc["restore"]
        assert ws.mam("prune", env=env).returncode == 0
        out, err = spawn.communicate(timeout=60)
    finally:
        if spawn.poll() is None:
            spawn.kill()
            spawn.communicate()
    assert spawn.returncode == 0, err
    row = _rows(ws)["y"]
    assert row["status"] == "running" and json.loads(out)["session"]["status"] == "running", row
    names = tmux.run(server, "list-sessions", "-F", "#{session_name}").stdout.split()
    assert names.count("y") == 1
    assert not list((ws.root / ".mam" / "locks").glob("spawn-*"))  # the spawn's lock went with it


def test_a_starting_row_whose_spawn_is_gone_is_still_settled(ws: Workspace, tmux: Tmux) -> None:
    """The lock of a spawn that was killed is held by nobody (the kernel dropped it): its row is drift again."""
    server = tmux.name()
    tmux.agent(server, "other")
    token = "0123456789abcdef"
    ws.write_registry(f"version: 1\nsessions:\n  - {{name: y, backend: tmux, server: {server}, status: starting, "
                      f"spawn_token: '{token}'}}\n")
    locks = ws.root / ".mam" / "locks"
    locks.mkdir()
    (locks / f"spawn-{token}.lock").touch()  # left by a spawn killed before it could remove it
    doc = ws.mam_json("reconcile", "--apply")
    assert [(d["class"], d["name"]) for d in doc["drifts"] if d["name"] == "y"] == [("A", "y")]
    assert _rows(ws)["y"]["status"] == "terminated"


def _can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "--net", "--mount", "true"], capture_output=True, timeout=20,
                              stdin=subprocess.DEVNULL).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_unshare = pytest.mark.skipif(not _can_unshare(), reason="needs `unshare --net --mount` (root)")
# mam run in a sandbox: without the network (its own, empty network namespace), or with no /proc at all (as on
# macOS or BSD, or a container that hides it).
SANDBOXES = {
    "no network": ["unshare", "--net", "--"],
    "no /proc": ["unshare", "--mount", "--", "sh", "-c", 'mount -t tmpfs none /proc && exec "$@"', "sh"],
}


def _sandboxed(ws: Workspace, sandbox: str, *args: str) -> dict[str, Any]:
    proc = subprocess.run([*SANDBOXES[sandbox], sys.executable, "-m", "mam", *args, "--json"], env=ws.env,
                          cwd=ws.root, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


@needs_unshare
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_live_server_whose_socket_is_deleted_is_unknown_from_a_sandbox(ws: Workspace, tmux: Tmux,
                                                                        sandbox: str) -> None:
    """From where /proc/net/unix does not show the server's socket (another network namespace) or cannot be
    read, its deleted socket made the server `down`: reconcile ended its live agents and restore started a
    second server on the path."""
    server = tmux.name()
    ws.mam_json("spawn", "kept", "--server", server, "--command", "sleep 600")
    pid = int(tmux.run(server, "display-message", "-p", "#{pid}").stdout)
    path = tmux.socket_dir / server
    path.unlink()  # what a temp cleaner does
    try:
        state = _sandboxed(ws, sandbox, "status")["servers"][0]
        assert state["state"] == "unknown", state
        if sandbox == "no network":  # it looked in the server's namespace too, and found it
            assert f"kill -USR1 {pid}" in state["error"]["message"], state
        else:
            assert "cannot tell" in state["error"]["message"], state
        doc = _sandboxed(ws, sandbox, "reconcile", "--apply", "--restore")
        assert doc["drifts"] == [] and doc["restore"]["counts"]["restored"] == 0, doc
        assert _rows(ws)["kept"]["status"] == "running"
        assert not path.exists()  # no second server on the path
    finally:
        path.unlink(missing_ok=True)
        os.kill(pid, signal.SIGUSR1)  # the server makes its socket again; the teardown reaches it
    deadline = time.monotonic() + 10
    while not path.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)


@needs_unshare
def test_a_server_that_exited_is_still_down_from_a_sandbox_without_the_network(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    ws.mam_json("spawn", "gone", "--server", server, "--command", "sleep 600")
    tmux.run(server, "kill-server")
    (tmux.socket_dir / server).unlink(missing_ok=True)
    assert _sandboxed(ws, "no network", "status")["servers"][0]["state"] == "down"


def test_a_remote_tmux_printing_endlessly_is_unknown_over_the_output_limit(ws: Workspace, tmp_path: Path,
                                                                          sshd: Sshd) -> None:
    """Over ssh (the real sshd on 127.0.0.1): the remote tmux is the flooding stand-in, first on the remote PATH."""
    env = _flooding(ws, tmp_path, "tmux", shutil.which("tmux") or "/usr/bin/tmux", chunk="y\n")
    remote_path = f"{tmp_path / 'flood-bin'}:{Path(sys.executable).parent}:/usr/bin:/bin"
    remote_env = f"TMUX_TMPDIR={ws.env['TMUX_TMPDIR']} PATH={remote_path} FAULTY_PLAN={env['FAULTY_PLAN']}"
    env.update({"MAM_SSH_CONFIG": str(sshd.config_path), "PATH": ws.env["PATH"], "MAM_SSH_ENV": remote_env})
    ws.write_registry("version: 1\nsessions:\n"
                      f"  - {{name: a1, backend: tmux, server: s1, host: {sshd.host}, status: running}}\n")
    try:
        proc = _mam(ws, "status", "--json", env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        [server] = json.loads(proc.stdout)["servers"]
        assert server["state"] == "unknown", server
        assert f"ssh to {sshd.host}: tmux printed more than 1048576 bytes" in server["error"]["message"], server
    finally:
        sshd.close_masters(ws.root / ".mam" / "ssh")


def test_a_carriage_return_in_another_zellij_sessions_name_blinds_nothing(ws: Workspace, tmp_path: Path) -> None:
    """zellij lets a session name hold a `\\r`; read as a line break, that name split its listing line and every
    zellij server of the user was `unknown` (the fake zellij prints names raw, as zellij does)."""
    ws.env.update({"ZELLIJ_SOCKET_DIR": str(tmp_path / "zellij-sock"), "MAM_BACKEND": "zellij"})
    odd = "x\ry"
    try:
        ws.mam_json("spawn", "coder", "--command", "sleep 600", "--server", "vic", "--cwd", str(ws.root))
        made = subprocess.run(["zellij", "attach", "-b", odd], env=ws.env, capture_output=True, timeout=20)
        assert made.returncode == 0, made.stderr
        status = ws.mam_json("status")
        assert status["servers"][0]["state"] == "up", status["servers"]
        assert status["sessions"][0]["live"] == "alive"
    finally:
        subprocess.run([str(FAKES / "zellij"), "kill-all-sessions", "--yes"], env=ws.env, capture_output=True,
                       timeout=30)
