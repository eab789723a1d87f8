"""`mam spawn`, `mam stop` and `mam demo` on real tmux servers (private sockets, pinned HOME)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import Tmux, Workspace, live_processes_with

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

STAND_IN = "sh -c 'exec sleep 600'"


def test_spawn_scrubs_the_agent_and_registers_it_running(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    env = {**ws.env, "CLAUDECODE": "1", "CLAUDE_CODE_CHILD_SESSION": "1", "HERDR_PANE_ID": "w1:p1",
           "TMUX": "/tmp/tmux-0/default,1,0", "CLAUDE_CONFIG_DIR": "/cfg", "CLAUDE_PROJECT_DIR": str(ws.root)}
    doc = ws.mam_json("spawn", "worker-1", "--server", server, "--cwd", str(ws.root), "--command", STAND_IN,
                      env=env)
    session = doc["session"]
    assert (session["name"], session["status"], session["live"]) == ("worker-1", "running", "alive")
    assert session["cwd"] == str(ws.root) and session["pane_id"].startswith("%")
    pane = tmux.pane_env(server, "=worker-1")
    for marker in ("CLAUDECODE", "CLAUDE_CODE_CHILD_SESSION", "HERDR_PANE_ID"):
        assert marker not in pane
    assert pane.get("TMUX", "") != env["TMUX"]
    assert pane["CLAUDE_CONFIG_DIR"] == "/cfg" and pane["CLAUDE_PROJECT_DIR"] == str(ws.root)
    row = yaml.safe_load(ws.registry.read_text())["sessions"][0]
    assert row["status"] == "running" and row["backend"] == "tmux" and row["server"] == server
    assert row["pane"]["id"] == session["pane_id"]


def test_spawn_passes_arguments_exactly(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    server = tmux.name()
    out = tmp_path / "args"
    proc = ws.mam("spawn", "echoer", "--server", server, "--json", "--command",
                  f"sh -c 'printf \"%s|\" \"$@\" > {out}; exec sleep 600' x", "--", ";", "a;", "$HOME", "two words",
                  "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["session"]["live"] == "alive"
    deadline = time.monotonic() + 10
    while not (out.exists() and out.read_text().endswith("|")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert out.read_text() == ";|a;|$HOME|two words|--json|"


def test_a_running_name_is_refused(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    ws.mam_json("spawn", "dup", "--server", server, "--command", STAND_IN)
    proc = ws.mam("spawn", "dup", "--server", server, "--command", STAND_IN, "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["code"] == "invalid_name"
    assert len(yaml.safe_load(ws.registry.read_text())["sessions"]) == 1


def test_a_re_spawn_replaces_the_inactive_row_and_drops_its_old_outcome(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    ws.write_registry("version: 1\nsessions:\n- " + json.dumps({
        "name": "again", "backend": "tmux", "server": server, "status": "terminated", "team": "blue",
        "created_at": "2026-01-01T00:00:00Z", "terminated_at": "2026-01-01T01:00:00Z",
        "terminated_reason": "absent from tmux server", "stopped_at": "2026-01-01T01:00:00Z",
        "pane": {"cwd": "/old", "id": "%9"}}) + "\n")
    ws.mam_json("spawn", "again", "--server", server, "--cwd", str(ws.root), "--command", STAND_IN)
    rows = yaml.safe_load(ws.registry.read_text())["sessions"]
    assert len(rows) == 1
    row = rows[0]
    assert row["status"] == "running" and row["team"] == "blue"  # a key of the user's own is kept
    for stale in ("terminated_at", "terminated_reason", "stopped_at"):
        assert stale not in row, row
    assert row["created_at"] != "2026-01-01T00:00:00Z"
    assert row["pane"]["cwd"] == str(ws.root) and row["pane"]["id"] != "%9"


def test_stop_then_status(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    ws.mam_json("spawn", "short-lived", "--server", server, "--command", STAND_IN)
    doc = ws.mam_json("stop", "short-lived")
    assert doc["status"] == "stopped"
    status = ws.mam_json("status")
    assert status["sessions"][0]["status"] == "stopped" and status["sessions"][0]["live"] == "absent"
    assert status["servers"][0]["state"] in ("up", "down")
    again = ws.mam_json("stop", "short-lived")  # not running: not an error, and nothing rewritten
    assert again["status"] == "stopped"


def test_stop_of_an_agent_that_died_marks_it_terminated(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    ws.mam_json("spawn", "gone", "--server", server, "--command", STAND_IN)
    tmux.run(server, "kill-session", "-t", "=gone")
    assert ws.mam_json("stop", "gone")["status"] == "terminated"


def test_no_autostart_spawn_on_a_down_server_starts_nothing(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    before = tmux.sockets()
    proc = ws.mam("spawn", "x", "--server", server, "--command", STAND_IN, env={**ws.env, "MAM_NO_AUTOSTART": "1"})
    assert proc.returncode == 1 and "MAM_NO_AUTOSTART=1" in proc.stderr
    assert tmux.sockets() == before


def test_ten_concurrent_spawns_lose_no_row(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    ws.mam_json("bootstrap", "--server", server)
    procs = [subprocess.Popen([sys.executable, "-m", "mam", "spawn", f"agent-{i}", "--server", server,
                               "--command", STAND_IN], env=ws.env, cwd=ws.root, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(10)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    rows = yaml.safe_load(ws.registry.read_text())["sessions"]
    assert sorted(r["name"] for r in rows) == sorted(f"agent-{i}" for i in range(10))
    assert all(r["status"] == "running" for r in rows)


def _processes_under(tmux_tmpdir: str) -> list[str]:
    """Live processes started with TMUX_TMPDIR=`tmux_tmpdir` (a tmux server or client of that socket dir, or a
    pane it ran): only what one run made."""
    return list(live_processes_with("TMUX_TMPDIR", tmux_tmpdir).values())


def test_demo_runs_and_leaves_nothing_behind(ws: Workspace, tmp_path: Path) -> None:
    proc = ws.mam("demo", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "mark_terminated" in proc.stdout and "terminated" in proc.stdout
    first = proc.stdout.split("$ mam --backend tmux status\n")[1].splitlines()
    assert "blocked" in first[2].split() and "generic.proceed" in first[2], first  # the one asking a question
    assert "fixes applied" in proc.stdout
    # Only what this run made is checked (its own directory, its own processes), not /tmp or every process:
    # other tests and other runs on this machine make mam-demo-* directories and mam-demo servers of their own.
    match = re.search(r"\(socket under (/tmp/mam-demo-[^)\s]+)\)", proc.stdout)
    assert match, proc.stdout
    tmpdir = match.group(1)
    assert not Path(tmpdir).exists()
    deadline = time.monotonic() + 20  # a pane's process may take a moment to act on the hangup tmux sent it
    while (left := _processes_under(tmpdir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == []


def test_spawn_into_a_server_mam_did_not_start_still_scrubs(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    polluted = {**ws.env, "CLAUDECODE": "1", "CLAUDE_CODE_CHILD_SESSION": "1", "KEEP_ME": "yes"}
    subprocess.run(["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-s", "theirs"], env=polluted,
                   check=True, timeout=20)
    ws.mam_json("spawn", "clean-one", "--server", server, "--command", STAND_IN, env={**ws.env, "KEEP_ME": "yes"})
    pane = tmux.pane_env(server, "=clean-one")
    assert "CLAUDECODE" not in pane and "CLAUDE_CODE_CHILD_SESSION" not in pane
    assert pane["KEEP_ME"] == "yes" and pane["TMUX"]
    assert "CLAUDECODE" in tmux.pane_env(server, "=theirs")  # their own pane is left as it was


def test_a_name_tmux_cannot_keep_is_refused_before_anything_is_written(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    proc = ws.mam("spawn", "a.b", "--server", server, "--command", STAND_IN, "--json")
    assert proc.returncode == 2, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "invalid_name"
    assert error["message"] == "tmux cannot keep the agent name 'a.b': it turns '.' and ':' in session names into '_'"
    assert not ws.registry.exists()  # it used to leave a terminated row
    assert server not in tmux.sockets()
    proc = ws.mam("stop", "a.b", "--server", server, "--force")
    assert proc.returncode == 2 and "tmux cannot keep the agent name 'a.b'" in proc.stderr
    assert not ws.registry.exists()


def test_stop_of_a_name_that_is_not_registered_fails_unless_forced(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    tmux.agent(server, "stray")
    proc = ws.mam("stop", "stray", "--server", server)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[0] == f"mam: stray is not registered here on tmux server {server} ({ws.registry})"
    assert "stray" in tmux.run(server, "list-sessions", "-F", "#{session_name}").stdout  # left running
    proc = ws.mam("stop", "nobody")  # no --server: the same answer
    assert proc.returncode == 1 and proc.stderr.startswith(f"mam: nobody is not registered here ({ws.registry})")
    assert "`mam --backend tmux stop --force nobody --server mam` asks that server anyway" in proc.stderr
    doc = ws.mam_json("stop", "stray", "--server", server, "--force")
    assert (doc["status"], doc["registered"]) == ("stopped", False)
    assert "stray" not in tmux.run(server, "list-sessions", "-F", "#{session_name}", check=False).stdout
    doc = ws.mam_json("stop", "stray", "--server", server, "--force")  # gone now: said, not an error
    assert doc["status"] == "terminated"
    text = ws.mam("stop", "stray", "--server", server, "--force").stdout  # no row was marked: not "terminated"
    assert text == f"stray on tmux server {server}: no row to mark; stray was not running on tmux server {server}\n"
    assert not ws.registry.exists()  # --force never writes a row


def test_a_dead_pane_is_never_alive_and_stop_closes_it(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    ws.mam_json("spawn", "keeper", "--server", server, "--command", STAND_IN)
    # A session mam made (its @mam_pane set) whose program ended, kept by remain-on-exit, registered as running.
    tmux.run(server, "new-session", "-d", "-s", "ghost", "sleep 0.2", ";", "set-option", "-w", "remain-on-exit", "on",
             ";", "set-option", "-F", "@mam_pane", "#{pane_id}")
    deadline = time.monotonic() + 10
    while tmux.run(server, "list-panes", "-t", "=ghost:", "-F", "#{pane_dead}").stdout.strip() != "1":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    ws.mam_json("reconcile", "--adopt", "--apply")  # a dead pane is nothing to adopt
    assert [r["name"] for r in yaml.safe_load(ws.registry.read_text())["sessions"]] == ["keeper"]
    with ws.registry.open("a") as registry_file:
        registry_file.write("- " + json.dumps({"name": "ghost", "backend": "tmux", "server": server,
                                               "status": "running"}) + "\n")
    status = {s["name"]: s for s in ws.mam_json("status")["sessions"]}
    assert status["ghost"]["live"] == "absent" and status["keeper"]["live"] == "alive"
    assert [a["name"] for a in ws.mam_json("ls", "--server", server)["agents"]] == ["keeper"]
    doc = ws.mam_json("stop", "ghost")
    assert doc["status"] == "terminated" and "dead pane is closed" in doc["message"]
    sessions = tmux.run(server, "list-sessions", "-F", "#{session_name}").stdout.split()
    assert "ghost" not in sessions and "keeper" in sessions


def test_host_local_means_this_machine_in_rows_and_options(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    """`--host local` and a hand-written `host: local` row are this machine: no ssh is ever run for them."""
    server = tmux.name()
    seen = tmp_path / "typed"
    typed = f"import sys\nwith open({str(seen)!r}, 'w') as out: out.write(sys.stdin.readline())\nimport time\n" \
            "time.sleep(600)\n"
    proc = ws.mam("spawn", "here", "--server", server, "--host", "local", "--command", sys.executable, "--", "-c",
                  typed)
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(ws.registry.read_text())
    assert "host" not in doc["sessions"][0]  # this machine's row names no host
    doc["sessions"][0]["host"] = "local"  # as a user may write it
    ws.write_registry(yaml.safe_dump(doc))
    no_ssh = {**ws.env, "PATH": f"{tmp_path}:{ws.env['PATH']}"}
    (tmp_path / "ssh").write_text("#!/bin/sh\necho ssh must not run >&2\nexit 99\n")
    (tmp_path / "ssh").chmod(0o755)
    [row] = ws.mam_json("status", "--host", "local", env=no_ssh)["sessions"]
    assert (row["name"], row["live"], row.get("host")) == ("here", "alive", None)
    assert ws.mam_json("status", "--host", "elsewhere", env=no_ssh)["sessions"] == []
    sent = ws.mam("send", "here", "--host", "local", "--enter", "--", "hello from mam", env=no_ssh)
    assert sent.returncode == 0, sent.stderr
    deadline = time.monotonic() + 10
    while not (seen.exists() and seen.read_text().endswith("\n")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen.read_text() == "hello from mam\n"
    waited = ws.mam("wait", "here", "--host", "local", "--until", "working,blocked,idle,done,unknown",
                    "--timeout", "10", env=no_ssh)
    assert waited.returncode == 0, waited.stderr
    assert ws.mam_json("stop", "here", "--host", "local", env=no_ssh)["status"] == "stopped"
    assert "here" not in tmux.run(server, "list-sessions", "-F", "#{session_name}", check=False).stdout.split()
    assert yaml.safe_load(ws.registry.read_text())["sessions"][0]["status"] == "stopped"


TOKEN = "sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


# Each dies within spawn's watch, but a moment after its last line: a program's last bytes can still be in the
# kernel's pty buffers when tmux reaps it, and tmux 3.3a then closes the pane without them (twice in CI under load).
@pytest.mark.parametrize(("script", "shown"), [
    ('echo starting; echo "invalid key $MY_TOKEN" >&2; sleep 0.05; exit 3', "invalid key ***"),
    # a line longer than the pane (tmux wraps it) and than the reason (cut at 157 characters, in the token)
    ('echo starting; printf "%0140d key $MY_TOKEN\\n" 0 >&2; sleep 0.05; exit 3', " key ***..."),
])
def test_an_env_value_the_dying_agent_prints_is_hidden_in_the_reason(ws: Workspace, tmux: Tmux, script: str,
                                                                    shown: str) -> None:
    """An agent that dies at once may print a value passed with --env ("invalid key sk-..."): the reason mam
    shows and keeps in the registry has *** in its place, since the registry records variable names only;
    so does a piece of it that a cut left."""
    server = tmux.name()
    proc = ws.mam("spawn", "dies", "--server", server, "--env", "MY_TOKEN", "--command", "/bin/sh", "--",
                  "-c", script, env={**ws.env, "MY_TOKEN": TOKEN})
    assert proc.returncode == 1 and shown in proc.stderr, proc.stderr
    row = yaml.safe_load(ws.registry.read_text())["sessions"][0]
    assert row["status"] == "terminated" and shown in row["terminated_reason"]
    for text in (proc.stderr, ws.registry.read_text()):
        assert not any(TOKEN[i:i + 8] in text for i in range(len(TOKEN) - 7)), text


def test_env_values_reach_the_agent_but_never_its_command_line(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    """`--env NAME` hands the agent the caller's value exactly (tmux formats and ';' are data), through the
    session's environment: tmux keeps a pane's start command for anyone who lists the server to read."""
    server, seen = tmux.name(), tmp_path / "seen"
    value = "s3cret #{pane_id} $(id) ;"
    proc = ws.mam("spawn", "keeper", "--server", server, "--env", "MY_TOKEN", "--command", sys.executable, "--",
                  "-c", f"import os, time\nopen({str(seen)!r}, 'w').write(os.environ['MY_TOKEN'])\ntime.sleep(600)",
                  env={**ws.env, "MY_TOKEN": value})
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 10
    while not (seen.exists() and seen.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen.read_text() == value
    shown = tmux.run(server, "list-panes", "-a", "-F", "#{pane_start_command}").stdout
    assert "s3cret" not in shown and "keeper" in tmux.run(server, "ls", "-F", "#{session_name}").stdout
    assert "s3cret" not in ws.registry.read_text()


def test_a_kind_label_beside_command_must_be_a_kind_mam_knows(ws: Workspace, tmux: Tmux) -> None:
    """`--agent KIND --command CMD` says whose screen CMD draws: a misspelt kind would read no screen, so it is
    refused before anything starts; a kind of the workspace's own .mam/states.yaml is one mam knows."""
    server = tmux.name()
    proc = ws.mam("spawn", "w1", "--server", server, "--agent", "claud", "--command", "sleep 600")
    assert proc.returncode == 2 and proc.stderr.startswith("mam: unknown agent kind 'claud': known are "), proc.stderr
    assert "aider" in proc.stderr and "generic" not in proc.stderr
    assert not ws.registry.exists() and server not in tmux.sockets()
    (ws.root / ".mam").mkdir(exist_ok=True)
    (ws.root / ".mam" / "states.yaml").write_text("schema: 1\nkinds:\n  mybot:\n    programs: [mybot]\n")
    doc = ws.mam_json("spawn", "w1", "--server", server, "--agent", "mybot", "--command", "sleep 600")
    assert doc["session"]["live"] == "alive" and doc["session"]["agent"] == "mybot"
