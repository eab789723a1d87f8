"""Remote hosts as a user drives them: `mam ... --host H` and `host:` rows, through the real sshd on 127.0.0.1 and
real tmux behind it. The "remote" tmux servers live in the test's private TMUX_TMPDIR, set on the remote side by
$MAM_SSH_ENV, so this machine's tmux can look at them too; no default server is ever reached."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sshd import Sshd

from conftest import Workspace

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@dataclass
class Remote:
    ws: Workspace
    sshd: Sshd
    env: dict[str, str]
    servers: list[str]

    def server(self) -> str:
        name = f"mam-rc-{uuid.uuid4().hex[:8]}"
        self.servers.append(name)
        return name

    def mam(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return self.ws.mam("--backend", "tmux", *args, env=env or self.env)

    def mam_json(self, *args: str, expect: int = 0, env: dict[str, str] | None = None) -> dict[str, object]:
        proc = self.mam(*args, "--json", env=env)
        assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
        doc: dict[str, object] = json.loads(proc.stdout)
        return doc

    def tmux(self, server: str, *args: str) -> subprocess.CompletedProcess[str]:
        """This machine's look at the "remote" server (the same machine, the same private TMUX_TMPDIR)."""
        return subprocess.run(["tmux", "-L", server, "-f", "/dev/null", *args], env=self.ws.env, capture_output=True,
                              text=True, timeout=20, stdin=subprocess.DEVNULL)


@pytest.fixture
def remote(ws: Workspace, sshd: Sshd) -> Iterator[Remote]:
    env = {**ws.env, "MAM_SSH_CONFIG": str(sshd.config_path), "MAM_SSH_ENV": f"TMUX_TMPDIR={ws.env['TMUX_TMPDIR']}",
           "MAM_TMUX_CONFIG": "/dev/null", "MAM_TIMEOUT": "10"}
    r = Remote(ws, sshd, env, [])
    try:
        yield r
    finally:
        sshd.start()
        for server in r.servers:
            r.tmux(server, "kill-server")
        sshd.close_masters(ws.root / ".mam" / "ssh")


def _spawn(r: Remote, name: str, server: str, *extra: str, env: dict[str, str] | None = None) -> dict[str, object]:
    return r.mam_json("spawn", name, "--server", server, "--host", r.sshd.host, "--cwd", "/tmp",
                      "--command", "sleep 600", *extra, env=env)


def test_spawn_status_and_stop_on_a_remote_host(remote: Remote) -> None:
    server = remote.server()
    doc = _spawn(remote, "far", server)
    session = doc["session"]
    assert isinstance(session, dict)
    assert (session["host"], session["status"], session["live"]) == (remote.sshd.host, "running", "alive")
    assert "far" in remote.tmux(server, "list-sessions", "-F", "#{session_name}").stdout.split()
    assert f"host: {remote.sshd.host}" in remote.ws.registry.read_text() or '"host"' in remote.ws.registry.read_text()

    status = remote.mam_json("status")
    [entry] = status["sessions"]  # type: ignore[misc]
    assert (entry["host"], entry["live"]) == (remote.sshd.host, "alive"), status["servers"]
    [srv] = status["servers"]  # type: ignore[misc]
    assert (srv["host"], srv["server"], srv["state"], srv["agents"]) == (remote.sshd.host, server, "up", 1)
    table = remote.mam("status", env={**remote.env, "COLUMNS": "200"}).stdout
    assert "HOST" in table.splitlines()[1] and remote.sshd.host in table

    assert remote.mam_json("status", "--host", "local")["sessions"] == []
    assert len(remote.mam_json("status", "--host", remote.sshd.host)["sessions"]) == 1  # type: ignore[arg-type]

    stopped = remote.mam_json("stop", "far")
    assert (stopped["host"], stopped["status"]) == (remote.sshd.host, "stopped")
    assert "far" not in remote.tmux(server, "list-sessions", "-F", "#{session_name}").stdout.split()


def test_bootstrap_and_ls_on_a_remote_host_and_a_query_never_starts_one(remote: Remote) -> None:
    server = remote.server()
    down = remote.mam_json("ls", "--server", server, "--host", remote.sshd.host)
    assert down["server"]["state"] == "down"  # type: ignore[index]
    assert remote.tmux(server, "list-sessions").returncode != 0  # the query started nothing there
    up = remote.mam_json("bootstrap", "--server", server, "--host", remote.sshd.host)
    assert (up["host"], up["state"], up["started"]) == (remote.sshd.host, "up", True)
    assert remote.tmux(server, "list-sessions").returncode == 0
    again = remote.mam_json("bootstrap", "--server", server, "--host", remote.sshd.host)
    assert again["started"] is False


def test_a_dead_remote_server_is_drift_and_a_stopped_sshd_is_unknown_leaving_rows_alone(remote: Remote) -> None:
    server = remote.server()
    _spawn(remote, "gone", server)
    _spawn(remote, "kept", server)
    remote.sshd.stop()
    before = remote.ws.registry.read_bytes()
    status = remote.mam_json("status")
    [srv] = status["servers"]  # type: ignore[misc]
    assert srv["state"] == "unknown" and "refused" in srv["error"]["message"], srv
    assert {s["live"] for s in status["sessions"]} == {"unknown"}  # type: ignore[union-attr]
    rec = remote.mam_json("reconcile", "--apply")
    assert rec["drifts"] == [] and rec["confirmed"] is False and rec["written"] == 0
    assert remote.ws.registry.read_bytes() == before  # nothing recorded dead on ssh's word

    remote.sshd.start()
    remote.tmux(server, "kill-session", "-t", "=gone")
    rec = remote.mam_json("reconcile", "--apply")
    [drift] = rec["drifts"]  # type: ignore[misc]
    assert (drift["class"], drift["name"], drift["host"]) == ("A", "gone", remote.sshd.host)
    rows = remote.mam_json("status")["sessions"]
    assert {s["name"]: s["status"] for s in rows} == {"gone": "terminated", "kept": "running"}  # type: ignore[union-attr]


def test_markers_exported_here_never_reach_the_remote_tmux_server(remote: Remote) -> None:
    server = remote.server()
    marked = {**remote.env, "TMUX": "/tmp/tmux-0/default,1,0", "TMUX_PANE": "%9", "HERDR_ENV": "1",
              "CLAUDECODE": "1", "CLAUDE_CODE_SESSION_ID": "abc"}
    _spawn(remote, "clean", server, env=marked)
    shown = remote.tmux(server, "show-environment", "-g").stdout.splitlines()
    names = {line.split("=", 1)[0] for line in shown}
    assert not names & {"TMUX_PANE", "HERDR_ENV", "CLAUDECODE", "CLAUDE_CODE_SESSION_ID"}, shown
    assert not [line for line in shown if line.startswith("TMUX=")], shown


def test_a_remote_agent_keeps_the_variables_its_host_gives_and_this_machine_lacks(remote: Remote) -> None:
    server = remote.server()
    seen = remote.ws.root / "agent-env"
    env = {**remote.env, "MAM_SSH_ENV": remote.env["MAM_SSH_ENV"] + " ONLY_ON_THE_HOST=there"}
    assert "ONLY_ON_THE_HOST" not in env  # set on the remote side only
    proc = remote.mam("spawn", "envy", "--server", server, "--host", remote.sshd.host, "--cwd", "/tmp",
                      "--command", "/bin/sh", "--", "-c", f"env > {seen}.tmp && mv {seen}.tmp {seen}; exec sleep 600",
                      env=env)
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 20
    while not seen.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "ONLY_ON_THE_HOST=there" in seen.read_text().splitlines()  # it was unset: this machine has no such name


@pytest.mark.parametrize("host", ["-oProxyCommand=touch /tmp/pwned", "a b", "h;id", "$(id)"])
def test_a_host_ssh_could_read_as_an_option_is_refused_before_anything_runs(remote: Remote, host: str) -> None:
    for args in (["status", "--host", host], ["spawn", "x", "--host", host, "--cwd", "/tmp", "--command", "true"],
                 ["bootstrap", "--server", "s", "--host", host]):
        proc = remote.mam(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.count("\n") <= 2 and "Traceback" not in proc.stderr
    assert not remote.ws.registry.exists()


def test_a_hand_written_host_row_that_ssh_would_misread_is_refused_with_its_line(remote: Remote) -> None:
    remote.ws.write_registry("sessions:\n  - name: a\n    backend: tmux\n    server: s\n    host: -oProxyCommand=x\n")
    proc = remote.mam("status")
    assert proc.returncode == 2 and "agent-sessions.yaml:5" in proc.stderr, proc.stderr


def test_a_remote_spawn_needs_an_absolute_directory_that_exists_there(remote: Remote) -> None:
    server = remote.server()
    relative = remote.mam("spawn", "x", "--server", server, "--host", remote.sshd.host, "--command", "sleep 9")
    assert relative.returncode == 2 and "absolute" in relative.stderr
    missing = remote.mam("spawn", "x", "--server", server, "--host", remote.sshd.host, "--cwd", "/no/such/dir",
                         "--command", "sleep 9")
    assert missing.returncode == 2 and "not a directory on" in missing.stderr
    assert not remote.ws.registry.exists()


def test_exec_runs_the_backends_command_line_on_the_host(remote: Remote) -> None:
    server = remote.server()
    _spawn(remote, "seen", server)
    proc = remote.mam("exec", "--server", server, "--host", remote.sshd.host, "--", "list-sessions", "-F",
                      "#{session_name}")
    assert proc.returncode == 0, proc.stderr
    assert "seen" in proc.stdout.split()


def test_a_directory_check_that_ssh_could_not_make_is_never_not_a_directory(remote: Remote, tmp_path: Path) -> None:
    """`test -d` answers 0 or 1; ssh's own 255 (a connection that failed without a word) is no answer about the
    directory: a CI run once called /tmp 'not a directory' (exit 2, bad input) on such a failure."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in *"test -d"*) exit 255;; esac; done\n'
                   'exec /usr/bin/ssh "$@"\n')
    ssh.chmod(0o755)
    env = {**remote.env, "PATH": f"{bin_dir}{os.pathsep}{remote.env['PATH']}"}
    proc = remote.ws.mam("--backend", "tmux", "spawn", "far", "--server", remote.server(), "--host",
                         remote.sshd.host, "--cwd", "/tmp", "--command", "sleep 600", env=env)
    assert proc.returncode == 1, proc.stderr
    assert "not a directory" not in proc.stderr and f"could not ask {remote.sshd.host} about --cwd /tmp" in proc.stderr


def test_peek_reads_a_remote_screen_and_attach_goes_through_ssh_with_a_terminal(remote: Remote) -> None:
    server = remote.server()
    _spawn(remote, "far", server, "--command", "sh -c 'echo far-away-line; sleep 600'")
    deadline = time.monotonic() + 30
    lines: list[str] = []
    while not any("far-away-line" in line for line in lines) and time.monotonic() < deadline:
        doc = remote.mam_json("peek", "far")
        assert isinstance(doc["lines"], list)
        lines = [str(line) for line in doc["lines"]]
        time.sleep(0.2)
    assert any("far-away-line" in line for line in lines)
    assert doc["host"] == remote.sshd.host
    proc = remote.mam("attach", "far", env={**remote.env, "MAM_ATTACH_ECHO": "1"})
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(proc.stdout)["argv"]
    assert argv[0] == "ssh" and "-t" in argv and remote.sshd.host in argv
    # The remote command line ends with tmux's own attach of the agent's pane, on its server there.
    assert argv[-1].endswith(f"attach-session -t {doc['pane_id']}") and f"-L {server}" in argv[-1]


def test_a_worktree_on_a_remote_host_is_made_and_removed_there(remote: Remote, tmp_path: Path) -> None:
    """`--worktree --host`: git runs on the host through the same ssh route, in --cwd's repository there."""
    repo = tmp_path / "far repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "first"]):
        subprocess.run([*git, *args], check=True, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    server = remote.server()
    doc = remote.mam_json("spawn", "farwt", "--server", server, "--host", remote.sshd.host, "--cwd", str(repo),
                          "--worktree", "--command", "sleep 600")
    place = repo / ".mam" / "worktrees" / "farwt"
    assert doc["worktree"]["path"] == str(place) and place.is_dir()  # type: ignore[index]
    # Its .gitignore, written there by git (`git apply`, through the same route): the repository stays clean.
    assert (repo / ".mam" / "worktrees" / ".gitignore").read_text().splitlines()[-1] == "*"
    assert subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL).stdout == ""
    (place / "unsaved.txt").write_text("x\n")
    assert remote.mam_json("status")["sessions"][0]["worktree"]["uncommitted"] == 1  # type: ignore[index]
    assert remote.mam("stop", "farwt").returncode == 0
    refused = remote.mam("worktree", "remove", "farwt")
    assert refused.returncode == 1 and "unsaved.txt" in refused.stderr and place.is_dir()
    (place / "unsaved.txt").unlink()
    assert remote.mam("worktree", "remove", "farwt").returncode == 0 and not place.exists()


def test_a_linked_worktrees_folder_on_the_host_is_refused(remote: Remote, tmp_path: Path) -> None:
    """The `.mam` link check (docs/trust.md) held on this machine only: on a host, a repository whose `.mam` is a
    link leading out of it had its worktree checked out wherever the link pointed. Now nothing is made (exit 2):
    no worktree, no branch, no agent, nothing written where it points."""
    repo, outside = tmp_path / "far repo", tmp_path / "outside"
    repo.mkdir()
    outside.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "first"]):
        subprocess.run([*git, *args], check=True, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    (repo / ".mam").symlink_to(outside)
    server = remote.server()
    proc = remote.mam("spawn", "farwt", "--server", server, "--host", remote.sshd.host, "--cwd", str(repo),
                      "--worktree", "--command", "sleep 600")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "outside the repository" in proc.stderr or "symbolic link" in proc.stderr, proc.stderr
    assert list(outside.iterdir()) == []
    branches = subprocess.run([*git, "branch", "--list", "mam/*"], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL).stdout
    registry = remote.ws.registry
    assert branches == "" and (not registry.exists() or "farwt" not in registry.read_text())
    assert "farwt" not in remote.tmux(server, "list-sessions", "-F", "#{session_name}").stdout
