"""Hostile strings against the tmux backend, on real tmux servers (private sockets, pinned HOME): directories
and commands mam hands tmux, text a pane controls coming back in the listing, and a deleted socket file."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import Tmux, Workspace
from mam.calls import runner
from mam.plugin.records import CallContext, Failure, SpawnRequest
from mam.testing import FakeRunner
from mam_tmux.backend import TmuxBackend

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

SLEEP = "sleep 600"


def _rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in yaml.safe_load(ws.registry.read_text())["sessions"]}


def _pane_cwd(tmux: Tmux, server: str, name: str) -> str:
    pid = tmux.run(server, "list-panes", "-t", "=" + name, "-F", "#{pane_pid}").stdout.split()[0]
    return os.readlink(f"/proc/{pid}/cwd")


def _listed(ws: Workspace, server: str, env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    doc = ws.mam_json("ls", "--server", server, env=env)
    assert doc["server"]["state"] == "up", doc
    return {a["name"]: a for a in doc["agents"]}


# Directory names that must reach the agent, the registry and the listing exactly as they are.
ODD_DIRECTORIES = ["repo-#(touch proof)", "semi;", "#{pane_id}", "##", "back\\slash", "back\\;", "a b é €",
                   "new\nline", "sep\x1fx", "~tilde", "-dash", "x\\n\\\\"]


def test_spawn_directories_are_passed_literally_and_listed_exactly(ws: Workspace, tmux: Tmux,
                                                                  tmp_path: Path) -> None:
    server = tmux.name()
    base = tmp_path / "dirs"
    for i, name in enumerate(ODD_DIRECTORIES):
        directory = base / name
        directory.mkdir(parents=True)
        # no --cwd for the first one: the directory the user is in is taken as it is, too
        args = ("--cwd", str(directory)) if i else ()
        proc = ws.mam("spawn", f"d{i}", "--server", server, "--command", SLEEP, *args, "--json", cwd=directory)
        assert proc.returncode == 0, (name, proc.stderr)
        assert json.loads(proc.stdout)["session"]["cwd"] == str(directory), name
    listed, rows = _listed(ws, server), _rows(ws)
    for i, name in enumerate(ODD_DIRECTORIES):
        directory = str(base / name)
        assert _pane_cwd(tmux, server, f"d{i}") == directory, name  # where the agent really runs
        assert listed[f"d{i}"]["cwd"] == directory, name
        assert rows[f"d{i}"]["pane"]["cwd"] == directory and rows[f"d{i}"]["status"] == "running", name
    time.sleep(0.5)  # a format job tmux started would have run by now
    assert [str(p) for p in tmp_path.rglob("proof")] == []
    assert not (ws.root / "proof").exists() and not Path("/proof").exists()


def test_cwd_is_exact_in_a_non_utf8_locale(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server = tmux.name()
    directory = tmp_path / "café\nbar"
    directory.mkdir()
    env = {**ws.env, "LC_ALL": "C", "LANG": "C"}
    ws.mam_json("spawn", "c1", "--server", server, "--command", SLEEP, "--cwd", str(directory), env=env)
    assert _listed(ws, server, env=env)["c1"]["cwd"] == str(directory)


def test_a_one_word_command_is_a_program_name_never_shell_text(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server = tmux.name()
    pwned = tmp_path / "pwned"
    proc = ws.mam("spawn", "w1", "--server", server, "--command", f"'touch {pwned}; exec sleep 60'")
    assert proc.returncode == 2 and "no such program" in proc.stderr, proc.stderr
    time.sleep(0.3)
    assert not pwned.exists()
    assert server not in tmux.sockets()  # refused before any server was started for it


def test_a_program_whose_path_holds_a_space_is_run(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server = tmux.name()
    program = tmp_path / "my agent" / "run"
    program.parent.mkdir()
    marker = tmp_path / "ran"
    program.write_text(f"#!/bin/sh\necho \"$#:$1\" > '{marker}'\nexec sleep 600\n")
    program.chmod(0o755)
    doc = ws.mam_json("spawn", "spaced", "--server", server, "--command", f'"{program}"')
    assert doc["session"]["live"] == "alive"
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.read_text() == "0:\n"


def test_a_program_name_with_an_equals_sign_is_never_read_as_a_variable(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    # a server mam did not start, holding a variable mam's environment has not: mam unsets it for the agent
    subprocess.run(["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-s", "theirs"],
                   env={**ws.env, "STRAY": "1"}, check=True, timeout=20)
    proc = ws.mam("spawn", "eq", "--server", server, "--command", f"A=1 {SLEEP}")
    assert proc.returncode == 2 and "no such program: A=1" in proc.stderr, proc.stderr
    assert "eq" not in _listed(ws, server)


def test_names_and_kinds_reach_tmux_literally(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    """Below the core's name check: the backend itself passes a name and a kind tmux would expand or split."""
    server = tmux.name()
    tmux.agent(server, "keep")
    ctx = CallContext(timeout=10, env=ws.env)
    backend = TmuxBackend()
    for name, kind in (("n#{pid}", "k#{pid}"), ("semi;", "kind;")):
        result = backend.spawn(server, SpawnRequest(name, kind, str(tmp_path), ("sleep", "600")), ctx)
        assert result.ok, result
    listing = backend.list_agents(server, ctx)
    assert not isinstance(listing, Failure)
    assert {(a.name, a.agent) for a in listing} >= {("n#{pid}", "k#{pid}"), ("semi;", "kind;")}
    assert backend.stop(server, "semi;", ctx).stopped and backend.stop(server, "n#{pid}", ctx).stopped
    assert tmux.run(server, "list-sessions", "-F", "#{session_name}").stdout == "keep\n"


def _wait_option(tmux: Tmux, server: str, session: str, value: str) -> None:
    deadline = time.monotonic() + 10
    target = f"={session}:"
    while tmux.run(server, "show-options", "-v", "-t", target, "@mam_agent", check=False).stdout != value + "\n":
        assert time.monotonic() < deadline, "the pane did not set its option"
        time.sleep(0.05)


def test_an_option_set_inside_a_pane_hides_no_agent(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server = tmux.name()
    forged = "x\ny\n$99\x1fghost\x1f0\x1f0\x1f%99\x1f1\x1fclaude\x1f/tmp"
    (tmp_path / "value").write_text(forged)
    script = tmp_path / "evil.sh"
    script.write_text(f"tmux set-option @mam_agent \"$(cat '{tmp_path / 'value'}')\"\nexec sleep 600\n")
    tmux.agent(server, "a-victim", "/tmp")
    tmux.agent(server, "b-evil", "/", f"sh {script}")
    tmux.agent(server, "c-victim", "/tmp")
    _wait_option(tmux, server, "b-evil", forged)
    ws.write_registry("sessions:\n" + "".join(
        f"  - {{name: {n}, backend: tmux, server: {server}, status: running}}\n"
        for n in ("a-victim", "b-evil", "c-victim")))
    listed = _listed(ws, server)
    assert sorted(listed) == ["a-victim", "b-evil", "c-victim"]
    assert listed["a-victim"]["cwd"] == "/tmp" and listed["b-evil"]["agent"] == forged
    rec = ws.mam_json("reconcile", "--apply")
    assert rec["drifts"] == []
    assert {r["status"] for r in _rows(ws).values()} == {"running"}


def test_a_directory_name_forges_no_agent(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server = tmux.name()
    forged = tmp_path / "d\n$99\x1fghost\x1f0\x1f0\x1f%99\x1f1\x1fclaude\x1f"
    forged.mkdir()
    tmux.agent(server, "real", str(forged))
    listed = _listed(ws, server)
    assert list(listed) == ["real"]
    assert listed["real"]["cwd"] == str(forged)


@pytest.mark.parametrize("stdout", [
    "$1\x1fa\x1f0\x1f0\x1f%1\x1f42\x1f\x1f/a\n$2\x1fb\x1f0\n",  # a record cut short
    "$1\x1fa\x1f0\x1f0\x1f%1\x1f42\x1f\x1f/a",  # no record end
    "$1\x1fa\x1f0\x1f0\x1f%1\x1f42\x1f\x1f/a\\q\n",  # an escape tmux never makes
    "$1\x1fa\x1f0\x1f0\x1f%1\x1f42\x1f\x1f/a\x1fextra\n",  # a field too many
    "$1\x1fa\x1fzero\x1f0\x1f%1\x1f42\x1f\x1f/a\n",  # a number that is none
])
def test_a_listing_that_does_not_parse_is_a_failure_never_fewer_agents(monkeypatch: pytest.MonkeyPatch,
                                                                        stdout: str) -> None:
    fake = FakeRunner()
    fake.answer(["tmux"], 0, stdout)
    monkeypatch.setattr(runner, "run", fake)
    listing = TmuxBackend().list_agents("s1", CallContext(timeout=1, env={}))
    assert isinstance(listing, Failure) and listing.parse_error


def _server_pid(tmux: Tmux, server: str) -> int:
    return int(tmux.run(server, "display-message", "-p", "#{pid}").stdout)


def _is_socket(path: Path) -> bool:
    return path.exists() and stat.S_ISSOCK(path.stat().st_mode)


# What can stand at a live server's socket path: nothing (a temp cleaner deleted it), or a file that does not
# listen (tmux then says "no server running on PATH", as it does for a server that exited).
REPLACEMENTS = {"deleted": lambda path: None, "touch": lambda path: path.touch(), "mkfifo": os.mkfifo}


@pytest.mark.parametrize("replacement", REPLACEMENTS)
def test_a_replaced_socket_file_of_a_live_server_is_unknown_not_down(ws: Workspace, tmux: Tmux,
                                                                     replacement: str) -> None:
    server = tmux.name()
    ws.mam_json("spawn", "kept", "--server", server, "--command", SLEEP)
    pid = _server_pid(tmux, server)
    path = tmux.socket_dir / server
    path.unlink()  # what a temp cleaner does
    REPLACEMENTS[replacement](path)
    try:
        doc = ws.mam_json("status")
        state = doc["servers"][0]
        assert state["state"] == "unknown", state
        assert f"kill -USR1 {pid}" in state["error"]["message"]
        assert doc["sessions"][0]["status"] == "running"
        ws.mam_json("reconcile", "--apply")
        assert _rows(ws)["kept"]["status"] == "running"
        assert ws.mam("stop", "kept").returncode == 1
        assert _rows(ws)["kept"]["status"] == "running"
        # nothing starts a second server on that name while the first one lives
        proc = ws.mam("spawn", "other", "--server", server, "--command", SLEEP)
        assert proc.returncode == 1 and f"kill -USR1 {pid}" in proc.stderr, proc.stderr
        assert not _is_socket(path)
    finally:
        if _is_socket(path):  # a second server started on the path: end it, not the first
            tmux.run(server, "kill-server", check=False)
        path.unlink(missing_ok=True)
        os.kill(pid, signal.SIGUSR1)  # the recovery the message names (and what lets the teardown reach it)
    deadline = time.monotonic() + 10
    while not _is_socket(path):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    status = ws.mam_json("status")
    assert status["servers"][0]["state"] == "up" and status["sessions"][0]["live"] == "alive"


def test_a_server_that_exited_is_still_down(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    ws.mam_json("spawn", "gone", "--server", server, "--command", SLEEP)
    tmux.run(server, "kill-server")
    (tmux.socket_dir / server).unlink(missing_ok=True)
    assert ws.mam_json("status")["servers"][0]["state"] == "down"


def test_parallel_bootstraps_of_a_down_server_all_succeed_and_one_starts_it(ws: Workspace, tmux: Tmux) -> None:
    for _ in range(3):
        server = tmux.name()
        procs = [subprocess.Popen([sys.executable, "-m", "mam", "bootstrap", "--server", server, "--json"],
                                  env=ws.env, cwd=ws.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(10)]
        docs = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            docs.append(json.loads(out))
        assert sum(d["started"] for d in docs) == 1, docs
        assert tmux.run(server, "list-sessions", "-F", "#{session_name}").stdout == "_mam_keepalive\n"


@pytest.mark.parametrize("stderr", ["server exited unexpectedly\n", "lost server\n"])
def test_a_down_message_without_a_path_is_checked_at_the_servers_socket(tmp_path: Path, stderr: str) -> None:
    import socket as sockets

    from mam.plugin.records import ErrorKind
    from mam_tmux.backend import classify_stderr

    path = str(tmp_path / "s")
    listener = sockets.socket(sockets.AF_UNIX)
    listener.bind(path)
    listener.listen()
    try:
        error = classify_stderr(stderr, path)
        assert error is not None and error.kind is ErrorKind.UNKNOWN and "still runs" in error.message
    finally:
        listener.close()
    error = classify_stderr(stderr, path)
    assert error is not None and error.kind is ErrorKind.SERVER_DOWN


def test_a_pane_split_off_beside_a_dead_agent_is_never_taken_for_it(ws: Workspace, tmux: Tmux) -> None:
    """The agent is the pane mam started it in: when that pane's program ends, a pane the user split off in the
    same session (here `cat`) is not the agent, so status says it is gone and send types nothing into it."""
    server = tmux.name()
    env = {**ws.env, "MAM_TMUX_CONFIG": "/dev/null"}
    doc = ws.mam_json("--backend", "tmux", "spawn", "agent", "--server", server, "--cwd", "/tmp",
                      "--command", "sleep 600", env=env)
    agent_pane = doc["session"]["pane_id"]
    tmux.run(server, "split-window", "-d", "-t", "=agent:", "cat")
    pid = tmux.run(server, "display", "-p", "-t", agent_pane, "#{pane_pid}").stdout.strip()
    os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while f"{agent_pane} 0" in tmux.run(server, "list-panes", "-a", "-F", "#{pane_id} #{pane_dead}").stdout:
        assert time.monotonic() < deadline  # gone, or kept dead where remain-on-exit is on
        time.sleep(0.05)
    [session] = ws.mam_json("--backend", "tmux", "status", env=env)["sessions"]
    assert session["live"] == "absent", session
    sent = ws.mam("--backend", "tmux", "send", "agent", "typed", "--enter", env=env)
    assert sent.returncode == 1 and "not running" in sent.stderr, sent.stderr
    panes = tmux.run(server, "list-panes", "-t", "=agent:", "-F", "#{pane_id} #{pane_dead}").stdout.split("\n")
    other = next(line.split()[0] for line in panes if line and line.split()[0] != agent_pane)
    assert "typed" not in tmux.run(server, "capture-pane", "-p", "-t", other).stdout
