"""What a spawn says, and how soon: a program that cannot start fails at once with the reason, a long wait
shows what it waits for (on a terminal only), and `mam stop` never writes over a row someone else rewrote."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import Tmux, Workspace

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _rows(ws: Workspace) -> dict[str, dict[str, object]]:
    return {r["name"]: r for r in yaml.safe_load(ws.registry.read_text())["sessions"]}


def _sessions(tmux: Tmux, server: str) -> list[str]:
    proc = tmux.run(server, "list-sessions", "-F", "#{session_name}", check=False)
    return proc.stdout.split()


@needs_tmux
@pytest.mark.parametrize("how", [["--agent", "codex"], ["--command", "/nonexistent/agent --fast"],
                                 ["--command", "./not-here"]])
def test_a_missing_program_is_refused_at_once_and_nothing_is_written(ws: Workspace, tmux: Tmux,
                                                                     how: list[str]) -> None:
    server = tmux.name()
    assert shutil.which("codex", path=ws.env["PATH"]) is None
    started = time.monotonic()
    proc = ws.mam("spawn", "a1", "--server", server, *how, env={**ws.env, "MAM_BOOTSTRAP_TIMEOUT": "30"})
    elapsed = time.monotonic() - started
    program = how[1].split()[0]
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[0] == f"mam: no such program: {program}"
    assert elapsed < 15, elapsed  # it was the whole MAM_BOOTSTRAP_TIMEOUT (30 s here) of waiting to be listed
    assert not ws.registry.exists()  # no row, not even a terminated one
    assert server not in tmux.sockets()  # and no server started for it


@needs_tmux
def test_a_program_that_is_not_executable_is_refused(ws: Workspace, tmux: Tmux) -> None:
    script = ws.root / "agent.sh"
    script.write_text("#!/bin/sh\nexec sleep 600\n")  # mode 0644
    proc = ws.mam("spawn", "a1", "--server", tmux.name(), "--command", "./agent.sh")
    assert proc.returncode == 2 and "not an executable program: ./agent.sh" in proc.stderr
    assert not ws.registry.exists()


@needs_tmux
def test_a_program_on_a_relative_path_entry_is_found_from_the_agents_directory(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    tools = ws.root / "tools"
    tools.mkdir()
    (tools / "my-agent").write_text("#!/bin/sh\nexec sleep 600\n")
    (tools / "my-agent").chmod(0o755)
    env = {**ws.env, "PATH": ws.env["PATH"] + os.pathsep + "tools"}  # relative: from the agent's cwd
    doc = ws.mam_json("spawn", "rel", "--server", server, "--cwd", str(ws.root), "--command", "my-agent", env=env)
    assert doc["session"]["live"] == "alive"


@needs_tmux
def test_a_program_that_exits_at_once_fails_with_its_status(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    ws.mam_json("bootstrap", "--server", server)
    proc = ws.mam("spawn", "f1", "--server", server, "--command", "false")
    assert proc.returncode == 1, proc.stderr
    # The status is told when tmux still had it (on a loaded machine the pane can be gone first).
    row = _rows(ws)["f1"]
    assert row["status"] == "terminated"
    assert row["terminated_reason"] in ("'false' exited at once with status 1", "'false' exited at once")
    assert proc.stderr.splitlines()[0] == f"mam: tmux did not start f1: {row['terminated_reason']}"
    assert "f1" not in _sessions(tmux, server)  # its dead pane does not hold the name
    # so the name can be used again at once
    assert ws.mam_json("spawn", "f1", "--server", server, "--command", "sleep 600")["session"]["live"] == "alive"


@needs_tmux
def test_the_last_line_a_program_printed_is_its_reason(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    # sleep 0.05: its last line reaches tmux before it is reaped (see test_lifecycle_tmux's dying agents)
    command = "sh -c 'echo starting; printf \"\\033[31mmissing API key\\033[0m\\n\" >&2; sleep 0.05; exit 3'"
    proc = ws.mam("spawn", "k1", "--server", server, "--command", command, "--json")
    assert proc.returncode == 1
    message = json.loads(proc.stdout)["error"]["message"]
    # The status is told when tmux still had it (on a loaded machine the pane can be gone first); the reason
    # always is, as the program's last line, escapes removed.
    reason = _rows(ws)["k1"]["terminated_reason"]
    assert reason in ("'sh' exited at once with status 3: missing API key", "'sh' exited at once: missing API key")
    assert message == f"tmux did not start k1: {reason}"


@needs_tmux
def test_an_agent_that_ends_later_leaves_its_dead_pane_however_it_ended(ws: Workspace, tmux: Tmux) -> None:
    """The watch for an exit at once ends, and the agent's window keeps `remain-on-exit on`: one that then exits
    0 leaves its dead pane too, so that mam can tell it finished; reconcile records that, and the next spawn of
    the name closes the pane."""
    server = tmux.name()
    ws.mam_json("spawn", "late", "--server", server, "--command", "sleep 1")
    options = tmux.run(server, "show-options", "-w", "-t", "=late:", "remain-on-exit").stdout
    assert options.strip() == "remain-on-exit on"
    deadline = time.monotonic() + 10
    while not _pane_dead(tmux, server, "late") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "late" in _sessions(tmux, server)
    # tmux 3.3a at times misses the SIGCHLD of a pane's program: the pane stays dead, its program a zombie,
    # until another child of the server ends. The reconcile reads the remains (run-shell true reaps it).
    assert ws.mam("reconcile", "--apply").returncode == 0
    row = _rows(ws)["late"]
    assert row["status"] == "terminated" and row["exit_status"] == 0
    ws.mam_json("spawn", "late", "--server", server, "--command", "sleep 60")
    assert _rows(ws)["late"]["status"] == "running"


def _pane_dead(tmux: Tmux, server: str, session: str) -> bool:
    shown = tmux.run(server, "list-panes", "-t", f"={session}:", "-F", "#{pane_dead}", check=False)
    return shown.returncode == 0 and shown.stdout.strip() == "1"


def _run_on_a_terminal(ws: Workspace, args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """mam with stderr on a pseudo-terminal and stdout on a pipe: what each shows."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "mam", *args], env=env, cwd=ws.root, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    screen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal's other side closed: mam is done
            break
        if not chunk:
            break
        screen += chunk
    os.close(leader)
    out, _ = proc.communicate(timeout=60)
    return proc.wait(), out.decode(), screen.decode(errors="replace")


def test_a_long_wait_says_what_it_waits_for_on_a_terminal(ws: Workspace) -> None:
    ws.herdr.start("team")
    slow = {**ws.env, "FAKE_HERDR_DELAY": "0.7"}  # workspace create + agent start: 1.4 s
    code, out, screen = _run_on_a_terminal(ws, ["spawn", "c1", "--agent", "claude", "--server", "team"], slow)
    assert code == 0, screen
    assert re.search(r"\rmam: starting c1 on herdr server team \([1-9] s\)\.\.\.", screen), screen
    assert screen.endswith(" \r")  # the line is wiped with blanks, so nothing is left half on screen
    assert "waiting" not in out and "(1 s)" not in out and out.startswith("c1 is running")

    code, out, screen = _run_on_a_terminal(ws, ["spawn", "c2", "--agent", "claude", "--server", "team", "--json"],
                                           slow)
    assert code == 0 and screen == ""  # never with --json
    assert json.loads(out)["session"]["name"] == "c2"

    proc = ws.mam("spawn", "c3", "--agent", "claude", "--server", "team", env=slow)
    assert proc.returncode == 0 and proc.stderr == ""  # never when stderr is not a terminal


def test_stop_leaves_a_row_that_changed_while_it_asked_the_backend(ws: Workspace) -> None:
    ws.herdr.start("team")
    ws.mam_json("spawn", "c1", "--agent", "claude", "--server", "team")
    calls = len(ws.herdr.calls())
    slow = {**ws.env, "FAKE_HERDR_DELAY": "1.5"}
    stop = subprocess.Popen([sys.executable, "-m", "mam", "stop", "c1", "--json"], env=slow, cwd=ws.root,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while len(ws.herdr.calls()) == calls:  # stop has read the registry and is now asking herdr
        assert time.monotonic() < deadline and stop.poll() is None
        time.sleep(0.02)
    # What a re-spawn, or a reconcile, writes meanwhile: another command's row now.
    doc = yaml.safe_load(ws.registry.read_text())
    doc["sessions"][0].update(status="starting", spawn_token="0123456789abcdef")
    ws.registry.write_text(yaml.safe_dump(doc))
    out, err = stop.communicate(timeout=60)
    assert stop.returncode == 1, err
    assert "another command changed its registry row meanwhile" in json.loads(out)["error"]["message"]
    row = _rows(ws)["c1"]
    assert row["status"] == "starting" and row["spawn_token"] == "0123456789abcdef" and "stopped_at" not in row


def test_zellij_a_program_that_exits_at_once_fails_with_its_status(ws: Workspace) -> None:
    ws.mam_json("--backend", "zellij", "bootstrap", "--server", "work")
    proc = ws.mam("--backend", "zellij", "spawn", "f1", "--server", "work", "--command", "false")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines()[0] == "mam: zellij did not start f1: 'false' exited at once with status 1"
    assert _rows(ws)["f1"]["status"] == "terminated"
    state = json.loads(Path(ws.env["ZELLIJ_SOCKET_DIR"], "fake-state.json").read_text())
    assert "f1" not in [p.get("title") for p in state["sessions"]["work"]["panes"]]  # its held pane is closed


def test_zellij_a_missing_program_is_refused_before_anything_runs(ws: Workspace) -> None:
    proc = ws.mam("--backend", "zellij", "spawn", "a1", "--server", "work", "--agent", "codex")
    assert proc.returncode == 2 and proc.stderr.startswith("mam: no such program: codex")
    assert not ws.registry.exists()
    assert not Path(ws.env["ZELLIJ_SOCKET_DIR"], "fake-state.json").exists()  # no session started


def test_zellij_stop_closes_a_pane_held_after_its_program_ended(ws: Workspace) -> None:
    env = {**ws.env, "MAM_BACKEND": "zellij"}
    ws.mam_json("bootstrap", "--server", "work", env=env)
    # The program ends when the test says so, not after a time a slow machine could overrun during the spawn.
    done = ws.root / "end-now"
    ws.mam_json("spawn", "h1", "--server", "work", "--command",
                f"sh -c 'while [ ! -e {done} ]; do sleep 0.05; done'", env=env)
    state_file = Path(ws.env["ZELLIJ_SOCKET_DIR"], "fake-state.json")
    done.touch()
    deadline = time.monotonic() + 20
    while ws.mam_json("status", env=env)["sessions"][0]["live"] != "absent":  # zellij holds the ended pane
        assert time.monotonic() < deadline
        time.sleep(0.1)
    doc = ws.mam_json("stop", "h1", env=env)
    assert doc["status"] == "terminated" and "held pane is closed" in doc["message"]
    assert "h1" not in [p.get("title") for p in json.loads(state_file.read_text())["sessions"]["work"]["panes"]]
