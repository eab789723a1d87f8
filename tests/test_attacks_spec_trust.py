"""A registry names what `mam restore` runs: a launch spec runs only if this user's mam wrote it (docs/trust.md,
"What a registry may make mam do"). Real tmux on private sockets, HOME and XDG_CONFIG_HOME pinned per test.

Each attack edits the row of an agent mam spawned and whose server then died, as a clone, a teammate or a
stranger could; the proof that nothing ran is a file the command would write, which stays absent, and a tmux
server that stays down."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import Tmux, Workspace

pytestmark = [pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"), pytest.mark.tmux]


def rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in yaml.safe_load(ws.registry.read_text())["sessions"]}


def edit_row(ws: Workspace, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    """A hand edit of one row, written back in YAML's block style (as a person's editor would leave it)."""
    document = yaml.safe_load(ws.registry.read_text())
    for row in document["sessions"]:
        if row["name"] == name:
            change(row)
    ws.write_registry(yaml.safe_dump(document, sort_keys=False))


def key_file(ws: Workspace) -> Path:
    return Path(ws.env["XDG_CONFIG_HOME"]) / "mam" / "spec.key"


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + 20
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def server_up(tmux: Tmux, server: str) -> bool:
    return tmux.run(server, "list-sessions", check=False).returncode == 0


class Victim:
    """An agent mam spawned (it appends to `mark` each time it starts), whose server was then killed."""

    def __init__(self, ws: Workspace, tmux: Tmux, tmp: Path) -> None:
        self.ws, self.tmux = ws, tmux
        self.server = tmux.name()
        self.work = tmp / "work"
        self.work.mkdir()
        self.mark = tmp / "ran"
        self.evil = tmp / "evil"
        self.command = f"sh -c 'echo ran >> {self.mark}; exec sleep 600'"
        proc = ws.mam("spawn", "--json", "victim", "--server", self.server, "--command", self.command,
                      "--cwd", str(self.work))
        assert proc.returncode == 0, proc.stderr
        wait_for(self.mark)
        self.mark.unlink()
        tmux.run(self.server, "kill-server")
        assert not server_up(tmux, self.server)

    def evil_command(self) -> str:
        return f"sh -c 'touch {self.evil}; exec sleep 600'"


@pytest.fixture
def victim(ws: Workspace, tmux: Tmux, tmp_path: Path) -> Victim:
    return Victim(ws, tmux, tmp_path)


def test_a_spec_mam_wrote_restores_and_hand_edits_of_other_fields_keep_its_signature(victim: Victim) -> None:
    ws = victim.ws
    assert rows(ws)["victim"]["spec_sig"].startswith("hmac-sha256:")
    mode = stat.S_IMODE(key_file(ws).stat().st_mode)
    assert mode == 0o600 and key_file(ws).is_file() and not key_file(ws).is_symlink()

    def notes(row: dict[str, Any]) -> None:  # what the registry docs invite a person to change
        row.update(status="terminated", note="mine, by hand", pane={"cwd": "/elsewhere"})

    edit_row(ws, "victim", notes)
    doc = ws.mam_json("restore", "--all")
    entry = doc["agents"][0]
    assert (entry["outcome"], entry["spec_trust"]) == ("restored", "signed"), entry
    wait_for(victim.mark)
    assert rows(ws)["victim"]["note"] == "mine, by hand"


def _command(v: Victim, row: dict[str, Any]) -> None:
    row["spec"]["command"] = v.evil_command()


def _args(v: Victim, row: dict[str, Any]) -> None:
    row["spec"]["command"] = "sh"
    row["spec"]["args"] = ["-c", f"touch {v.evil}; exec sleep 600"]


def _env_names(v: Victim, row: dict[str, Any]) -> None:
    row["spec"]["env_names"] = ["SECRET_TOKEN"]


def _cwd(v: Victim, row: dict[str, Any]) -> None:
    row["spec"]["cwd"] = str(v.evil.parent)


def _agent_session(v: Victim, row: dict[str, Any]) -> None:
    row["agent_session"] = "someone-elses"


def _backend_server(v: Victim, row: dict[str, Any]) -> None:
    row["server"] = v.tmux.name()


EDITS = {"command": _command, "args": _args, "env_names": _env_names, "cwd": _cwd,
         "agent_session": _agent_session, "server": _backend_server}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_hand_edited_spec_is_shown_and_not_run_by_restore(victim: Victim, edit: str) -> None:
    ws = victim.ws
    edit_row(ws, "victim", lambda row: EDITS[edit](victim, row))
    server = rows(ws)["victim"]["server"]
    env = {**ws.env, "SECRET_TOKEN": "hunter2-secret"}
    proc = ws.mam("restore", "--all", env=env)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "untrusted: its launch spec, or where and as what it runs, is not as your mam signed it" in proc.stdout
    assert "--trust-spec" in proc.stdout and "\n  argv: sh -c " in proc.stdout, proc.stdout
    if edit == "env_names":
        assert "\n  env: SECRET_TOKEN" in proc.stdout and "hunter2" not in proc.stdout
    doc = json.loads(ws.mam("restore", "--all", "--json", env=env).stdout)
    entry = doc["agents"][0]
    assert (entry["outcome"], entry["spec_trust"], doc["counts"]["untrusted"]) == ("untrusted", "mismatch", 1)
    assert not victim.mark.exists() and not victim.evil.exists()
    assert not server_up(victim.tmux, server)  # not even its server was started
    assert rows(ws)["victim"]["status"] == "running"  # the row as it was: the edit stays, nothing written


def test_a_changed_host_is_never_reached_to_start_anything(victim: Victim, tmp_path: Path) -> None:
    """A row moved to another host: restore would start a server and the agent there, over ssh. A loopback ssh
    (it runs the command here, and logs it) shows what mam asked of that host: a listing, nothing started."""
    log = tmp_path / "ssh.log"
    bin_dir = tmp_path / "sshbin"
    bin_dir.mkdir()
    fake = bin_dir / "ssh"
    fake.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
                    "if '-O' in sys.argv: sys.exit(0)\n"
                    "os.execvp('sh', ['sh', '-c', sys.argv[-1]])\n")
    fake.chmod(0o755)
    ws = victim.ws
    env = {**ws.env, "PATH": f"{bin_dir}:{ws.env['PATH']}"}
    edit_row(ws, "victim", lambda row: row.update(host="build1"))
    for args in (("restore", "--all"), ("reconcile", "--apply", "--restore")):
        proc = ws.mam(*args, env=env)
        said = f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"  # a str: pytest shows it whole
        assert proc.returncode == 1, said
        assert "untrusted" in proc.stdout and "argv: sh -c" in proc.stdout, said
    calls = [json.loads(line)[-1] for line in log.read_text().splitlines()]
    assert calls and not any("new-session" in call for call in calls), calls
    assert not victim.mark.exists() and not server_up(victim.tmux, victim.server)


def test_reconcile_apply_restore_skips_an_edited_spec_with_one_line_saying_how(victim: Victim) -> None:
    ws = victim.ws
    edit_row(ws, "victim", lambda row: _command(victim, row))
    proc = ws.mam("reconcile", "--apply", "--restore")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("restore victim")]
    assert len(lines) == 1 and "untrusted" in lines[0], proc.stdout
    assert f"`mam restore victim --server {victim.server} --trust-spec`" in lines[0]
    assert f"(argv: sh -c 'touch {victim.evil}; exec sleep 600')" in lines[0]
    assert rows(ws)["victim"]["status"] == "terminated"  # reconcile's own fix is written
    doc = json.loads(ws.mam("reconcile", "--apply", "--restore", "--json").stdout)
    assert doc["restore"]["counts"]["untrusted"] == 1
    assert not victim.evil.exists() and not server_up(victim.tmux, victim.server)


def test_reconcile_watch_never_asks_even_at_a_terminal(victim: Victim) -> None:
    import pty
    import select

    ws = victim.ws
    edit_row(ws, "victim", lambda row: _command(victim, row))
    master, slave = pty.openpty()
    os.write(master, b"y\ny\ny\n")  # a yes typed ahead: never read as consent
    proc = subprocess.Popen([sys.executable, "-m", "mam", "reconcile", "--apply", "--restore", "--watch", "0.2"],
                            env=ws.env, cwd=ws.root, stdin=slave, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    assert proc.stdout is not None
    seen = ""
    try:
        deadline = time.monotonic() + 60
        while seen.count("restore victim") < 2 and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.2)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536).decode()
                if not chunk:
                    break
                seen += chunk
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
        os.close(master)
    assert seen.count("restore victim") >= 2, seen
    assert all("untrusted" in line for line in seen.splitlines() if line.startswith("restore victim")), seen
    assert not victim.evil.exists() and not server_up(victim.tmux, victim.server)


def test_consent_runs_it_once_and_signs_it(victim: Victim) -> None:
    ws = victim.ws
    edit_row(ws, "victim", lambda row: _command(victim, row))
    plan = ws.mam_json("restore", "--all", "--trust-spec", "--dry-run")
    assert plan["agents"][0]["outcome"] == "would_restore" and plan["agents"][0]["spec_trust"] == "consented"
    assert not victim.evil.exists() and "spec_sig" in rows(ws)["victim"]
    doc = ws.mam_json("restore", "--all", "--trust-spec")
    assert (doc["agents"][0]["outcome"], doc["agents"][0]["spec_trust"]) == ("restored", "consented")
    wait_for(victim.evil)
    victim.evil.unlink()
    victim.tmux.run(victim.server, "kill-server")
    # signed as the user's now: no consent needed again (no backoff either: this test restores twice at once)
    doc = ws.mam_json("restore", "--all", env={**ws.env, "MAM_RESTORE_BACKOFF": "0"})
    assert (doc["agents"][0]["outcome"], doc["agents"][0]["spec_trust"]) == ("restored", "signed")
    wait_for(victim.evil)


@pytest.mark.parametrize(("answer", "runs"), [(b"y\n", True), (b"n\n", False), (b"\n", False)])
def test_a_yes_at_a_terminal_is_consent(victim: Victim, answer: bytes, runs: bool) -> None:
    import pty

    ws = victim.ws
    edit_row(ws, "victim", lambda row: _command(victim, row))
    master, slave = pty.openpty()
    os.write(master, answer)
    proc = subprocess.run([sys.executable, "-m", "mam", "restore", "--all"], env=ws.env, cwd=ws.root, stdin=slave,
                          capture_output=True, text=True, timeout=60)
    os.close(slave)
    os.close(master)
    assert "run it, and sign it as yours? [y/N]" in proc.stderr, proc.stderr
    assert f"  argv: sh -c 'touch {victim.evil}; exec sleep 600'" in proc.stderr
    assert f"  cwd: {victim.work}" in proc.stderr
    assert proc.returncode == (0 if runs else 1), (proc.stdout, proc.stderr)
    if runs:
        wait_for(victim.evil)
    else:
        assert "untrusted" in proc.stdout and not victim.evil.exists()
        assert not server_up(victim.tmux, victim.server)


def test_json_at_a_terminal_never_asks(victim: Victim) -> None:
    import pty

    ws = victim.ws
    edit_row(ws, "victim", lambda row: _command(victim, row))
    master, slave = pty.openpty()
    os.write(master, b"y\n")
    proc = subprocess.run([sys.executable, "-m", "mam", "restore", "--all", "--json"], env=ws.env, cwd=ws.root,
                          stdin=slave, capture_output=True, text=True, timeout=60)
    os.close(slave)
    os.close(master)
    assert "[y/N]" not in proc.stderr and proc.returncode == 1
    assert json.loads(proc.stdout)["agents"][0]["outcome"] == "untrusted"
    assert not victim.evil.exists()


def test_a_registry_from_another_user_is_not_trusted(victim: Victim, tmp_path: Path) -> None:
    """The same registry under another user's key (their own config folder), and under none."""
    other = tmp_path / "other-config"
    (other / "mam").mkdir(parents=True)
    (other / "mam" / "spec.key").write_text(os.urandom(32).hex() + "\n")
    (other / "mam" / "spec.key").chmod(0o600)
    ws = victim.ws
    for config, trust in ((other, "mismatch"), (tmp_path / "no-config", "no_key")):
        env = {**ws.env, "XDG_CONFIG_HOME": str(config)}
        doc = ws.mam_json("restore", "--all", env=env, expect=1)
        assert (doc["agents"][0]["outcome"], doc["agents"][0]["spec_trust"]) == ("untrusted", trust)
        assert doc["agents"][0]["argv"] == ["sh", "-c", f"echo ran >> {victim.mark}; exec sleep 600"]
    assert not (tmp_path / "no-config").exists()  # no key is made without consent
    assert not victim.mark.exists() and not server_up(victim.tmux, victim.server)


def _group_readable(path: Path) -> None:
    path.chmod(0o640)


def _symlink(path: Path) -> None:
    copy = path.with_name("elsewhere.key")
    shutil.copy(path, copy)
    copy.chmod(0o600)
    path.unlink()
    path.symlink_to(copy)


def _world_writable(path: Path) -> None:
    path.chmod(0o602)


def _not_a_key(path: Path) -> None:
    path.write_text("hello\n")


def _other_owner(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.chown(path, 54321, -1)


@pytest.mark.parametrize(("spoil", "message"), [
    (_group_readable, "mode 0640: group or others can read or write it (it must be 0600)"),
    (_world_writable, "mode 0602: group or others can read or write it"),
    (_symlink, "it is a symbolic link"),
    (_not_a_key, "not a key mam wrote"),
    (_other_owner, "owned by uid 54321, not by you"),
])
def test_an_unsafe_key_file_is_refused_with_a_clear_error(victim: Victim, spoil: Callable[[Path], None],
                                                          message: str) -> None:
    ws = victim.ws
    spoil(key_file(ws))
    text = ws.registry.read_text()
    for args in (("restore", "--all"), ("spawn", "again", "--server", victim.server, "--command", "sleep 600")):
        proc = ws.mam(*args)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        first = proc.stderr.splitlines()[0]
        assert first.startswith(f"mam: {key_file(ws)}: {message}"), proc.stderr
        assert "refusing to use it as the launch spec key" in first
    assert ws.registry.read_text() == text  # nothing written, nothing started
    assert not victim.mark.exists() and not server_up(victim.tmux, victim.server)


def test_a_session_reconcile_records_keeps_a_signed_row_signed_and_never_signs_a_forged_one(ws: Workspace) -> None:
    """Drift D writes `agent_session`, which the signature covers: mam signs the row again only when its signature
    held, so a forged row with a session the server reports stays untrusted (herdr's fake)."""
    proc = ws.mam("spawn", "--json", "coder", "--agent", "codex", "--server", "team", "--cwd", str(ws.root))
    assert proc.returncode == 0, proc.stderr
    document = yaml.safe_load(ws.registry.read_text())
    def spec() -> dict[str, Any]:
        return {"kind": "codex", "args": [], "cwd": str(ws.root), "env_names": []}

    document["sessions"] += [{"name": "forged", "server": "team", "status": "running", "agent": "codex",
                              "spec": spec(), "spec_sig": document["sessions"][0]["spec_sig"]},
                             {"name": "bare", "server": "team", "status": "running", "agent": "codex",
                              "spec": spec()}]
    ws.write_registry(yaml.safe_dump(document, sort_keys=False))
    listed = [{"name": name, "agent": "codex", "agent_status": "idle", "cwd": str(ws.root), "pane_id": f"w1:p{i}",
               "agent_session": {"agent": "codex", "kind": "id", "source": "herdr:codex", "value": f"019a-{i}"}}
              for i, name in enumerate(("coder", "forged", "bare"))]
    ws.herdr.set_agents("team", listed)
    assert ws.mam_json("reconcile", "--apply")["written"] == 3
    assert {name: row.get("agent_session") for name, row in rows(ws).items()} == {
        "coder": "019a-0", "forged": "019a-1", "bare": "019a-2"}
    ws.herdr.stop("team")
    ws.herdr.set_agents("team", [])
    plan = ws.mam_json("restore", "--all", "--dry-run")
    assert {a["name"]: (a["outcome"], a["spec_trust"]) for a in plan["agents"]} == {
        "coder": ("would_restore", "signed"), "forged": ("untrusted", "mismatch"), "bare": ("untrusted", "unsigned")}
    assert plan["agents"][0]["argv"] == ["codex", "resume", "019a-0"]
