"""`mam peek` and `mam attach` on real tmux (stand-in agents) and on the fake herdr: the screen a user would read,
and the client command a user would be put in front of (never a real terminal of the test's: the argv is
printed with $MAM_ATTACH_ECHO=1, or the client runs under a private pty and is detached)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conftest import Tmux, Workspace

STANDIN = str(Path(__file__).parent / "agents" / "standin.py")


def spawn(ws: Workspace, name: str, server: str, *args: str) -> None:
    proc = ws.mam("spawn", name, "--agent", "claude", "--server", server, "--command", sys.executable, "--",
                  STANDIN, *args)
    assert proc.returncode == 0, proc.stderr


def peeked(ws: Workspace, name: str, want: str, *args: str) -> dict[str, Any]:
    """The peek document once `want` is on the screen: a stand-in needs a moment to draw."""
    deadline = time.monotonic() + 20
    while True:
        doc = ws.mam_json("peek", name, *args)
        if any(want in line for line in doc["lines"]) or time.monotonic() > deadline:
            return doc
        time.sleep(0.2)


def test_peek_prints_the_last_lines_without_escapes(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    spawn(ws, "looker", server, "claude", "idle")
    doc = peeked(ws, "looker", "? for shortcuts", "--lines", "3")
    assert doc["name"] == "looker" and doc["backend"] == "tmux" and doc["server"] == server
    assert doc["pane_id"].startswith("%")
    assert len(doc["lines"]) == 3 and doc["lines"][-1].strip() == "? for shortcuts"
    # The stand-in draws in colour: none of its escapes reaches the reader.
    full = ws.mam_json("peek", "looker", "--lines", "100")
    assert any("Done. The tests pass." in line for line in full["lines"])
    assert not any("\x1b" in line for line in full["lines"])
    text = ws.mam("peek", "looker", "-n", "2")
    assert text.returncode == 0 and text.stdout.splitlines()[-1].strip() == "? for shortcuts"
    assert len(text.stdout.splitlines()) == 2
    for bad in (["-n", "0"], ["--lines", "10001"], ["--lines", "x"]):
        assert ws.mam("peek", "looker", *bad).returncode == 2, bad
    missing = ws.mam("peek", "nobody")
    assert missing.returncode == 1 and "no registered agent named nobody" in missing.stderr
    tmux.run(server, "kill-server")
    before = tmux.sockets()
    down = ws.mam("peek", "looker")
    assert down.returncode == 1 and "down" in down.stderr
    assert tmux.sockets() == before  # peek never starts a server


def test_peek_shows_hostile_text_inert(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    tmux.agent(server, "noisy", command="printf 'title\\033]0;pwned\\007 bell\\007 end\\n'; sleep 600")
    ws.write_registry(f"version: 1\nsessions:\n  - {{name: noisy, backend: tmux, server: {server}, "
                      "status: running}\n")
    doc = peeked(ws, "noisy", "end")
    line = next(line for line in doc["lines"] if "end" in line)
    assert "pwned" not in line and "\x07" not in line and "\x1b" not in line


def test_attach_argv_selects_the_pane_then_attaches_or_switches(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    spawn(ws, "front", server, "claude", "idle")
    pane = ws.mam_json("peek", "front")["pane_id"]
    echo = {**ws.env, "MAM_ATTACH_ECHO": "1"}
    proc = ws.mam("attach", "front", env=echo)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["argv"] == ["tmux", "-L", server, "select-window", "-t", pane, ";", "select-pane", "-t", pane, ";",
                           "attach-session", "-t", pane]
    # Without a terminal (and without the echo), attach refuses before it runs anything.
    refused = ws.mam("attach", "front")
    assert refused.returncode == 2 and "needs a terminal" in refused.stderr
    assert ws.mam("attach", "nobody", env=echo).returncode == 1
    assert ws.mam("attach", "front", "--json", env=echo).returncode == 2  # no --json: it runs a client


def _run_in_pty(argv: list[str], env: dict[str, str], cwd: Path, until: Any, timeout: float = 30) -> tuple[int, str]:
    """Run `argv` on a new pty until it exits; `until(output)` is called as output comes (to detach it)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its own terminal, never the test's
        os.chdir(cwd)
        os.execve(argv[0], argv, env)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            until(out.decode(errors="replace"))
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status), out.decode(errors="replace")
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_attach_on_a_pty_shows_the_agent_and_detaches(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    spawn(ws, "shown", server, "claude", "idle")
    peeked(ws, "shown", "? for shortcuts")
    env = {**ws.env, "TERM": "xterm"}
    detached: list[bool] = []

    def detach(output: str) -> None:
        if "for shortcuts" in output and not detached:
            tmux.run(server, "detach-client", "-s", "shown")
            detached.append(True)

    code, output = _run_in_pty([sys.executable, "-m", "mam", "attach", "shown"], env, ws.root, detach)
    assert detached and code == 0, output
    assert "Done. The tests pass." in output  # the agent's screen, drawn by tmux's own client
    # The pty's client did attach (tmux counts it until it detached) and is gone now.
    assert tmux.run(server, "list-clients").stdout.strip() == ""


def test_peek_and_attach_on_herdr(ws: Workspace) -> None:
    ws.write_registry("version: 1\nsessions:\n  - {name: h1, server: live, status: running, agent: claude}\n")
    ws.herdr.start("live")
    ws.herdr.set_agents("live", [{"agent": "claude", "agent_status": "idle", "cwd": "/repo", "name": "h1",
                                  "pane_id": "w1:p1", "terminal_id": "term_1"}])
    (ws.herdr.session_dir("live") / "screen-w1:p1.txt").write_text("one\n\x1b[1mtwo\x1b[0m\nthree\n")
    doc = ws.mam_json("peek", "h1", "--lines", "2")
    assert doc["lines"] == ["two", "three"] and doc["pane_id"] == "w1:p1"
    reads = [c["argv"] for c in ws.herdr.calls() if "read" in c["argv"]]
    # `--source visible`: herdr's `recent` is the last rows of the screen, blank ones too (here: nothing at all)
    assert reads == [["--session", "live", "agent", "read", "w1:p1", "--source", "visible", "--lines", "2"]]
    proc = ws.mam("attach", "h1", env={**ws.env, "MAM_ATTACH_ECHO": "1"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["argv"] == ["herdr", "session", "attach", "live"]


def test_attach_inside_a_client_of_the_same_server_switches_it(ws: Workspace, tmux: Tmux) -> None:
    server, other = tmux.name(), tmux.name()
    spawn(ws, "near", server, "claude", "idle")
    pane = ws.mam_json("peek", "near")["pane_id"]
    socket = tmux.socket_dir / server
    runs: dict[str, list[str]] = {}
    for label, tmux_var in (("same", f"{socket},123,0"), ("other", f"{tmux.socket_dir / other},123,0")):
        env = {**ws.env, "MAM_ATTACH_ECHO": "1", "TMUX": tmux_var}
        code, output = _run_in_pty([sys.executable, "-m", "mam", "attach", "near"], env, ws.root, lambda _: None)
        assert code == 0, output
        runs[label] = json.loads(output.strip().splitlines()[-1])["argv"]
    # On a terminal of a client of that server: that client (tmux finds it by the terminal) is switched.
    assert runs["same"][-3:] == ["switch-client", "-t", pane]
    # In a client of another server: a client of its own, attached (nested, as the user asked).
    assert runs["other"][-3:] == ["attach-session", "-t", pane]


def test_peek_and_attach_on_zellij(ws: Workspace) -> None:
    env = {**ws.env, "MAM_BACKEND": "zellij"}
    proc = ws.mam("spawn", "zed", "--agent", "claude", "--server", "zz", "--command", sys.executable, "--", STANDIN,
                  "claude", "blocked", env=env)
    try:
        assert proc.returncode == 0, proc.stderr
        deadline = time.monotonic() + 20
        doc: dict[str, Any] = {"lines": []}
        while not any("Do you want to proceed?" in line for line in doc["lines"]) and time.monotonic() < deadline:
            doc = ws.mam_json("peek", "zed", env=env)
            time.sleep(0.2)
        assert any("Do you want to proceed?" in line for line in doc["lines"])
        assert not any("\x1b" in line for line in doc["lines"])
        proc = ws.mam("attach", "zed", env={**env, "MAM_ATTACH_ECHO": "1"})
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["argv"] == ["zellij", "attach", "zz"]
    finally:
        subprocess.run([str(Path(__file__).parent / "fakes" / "zellij"), "kill-session", "zz"], env=ws.env,
                       capture_output=True, timeout=30)


def test_attach_from_a_pane_of_the_same_server_switches_its_client(ws: Workspace, tmux: Tmux) -> None:
    """The real thing: a client (on a pty of the test's) shows a session `home`; `mam attach near` typed in home's
    pane switches that very client to the agent's pane, and nests nothing."""
    import shlex

    server = tmux.name()
    spawn(ws, "near", server, "claude", "idle")
    keep = ("PATH", "HOME", "PYTHONPATH", "MAM_WORKSPACE", "TMUX_TMPDIR", "MAM_BACKEND", "MAM_TMUX_CONFIG",
            "XDG_CONFIG_HOME", "MAM_TIMEOUT")
    variables = " ".join(shlex.quote(f"{k}={ws.env[k]}") for k in keep if k in ws.env)
    command = (f"read go; env {variables} {shlex.quote(sys.executable)} -m mam attach near; "
               "echo attach-exit=$?; sleep 600")
    tmux.run(server, "new-session", "-d", "-s", "home", "-c", str(ws.root), command)
    env = {**ws.env, "TERM": "xterm"}

    def clients() -> list[str]:
        return tmux.run(server, "list-clients", "-F", "#{session_name}").stdout.split()

    switched: list[bool] = []

    def steer(output: str) -> None:
        if not switched and clients() == ["home"]:
            tmux.run(server, "send-keys", "-t", "=home:", "Enter")
            switched.append(False)
        elif switched == [False] and clients() == ["near"]:
            switched[0] = True
            tmux.run(server, "detach-client", "-s", "=near")  # ends the test's client

    code, output = _run_in_pty(["/usr/bin/env", "tmux", "-L", server, "attach-session", "-t", "=home"], env,
                               ws.root, steer)
    assert switched == [True], output
    assert code == 0
    assert "attach-exit=0" in tmux.run(server, "capture-pane", "-p", "-t", "=home:").stdout


def test_peek_send_and_attach_on_an_ended_agent_say_how_it_ended(ws: Workspace) -> None:
    """An agent whose row says how it ended (its exit status, the last lines its pane showed): peek, send,
    attach and wait say so, its lines quoted, and how to start it again; an end from before its last restore is
    not how it ends now."""
    ws.write_registry(
        "version: 1\nsessions:\n"
        f"  - {{name: crashed, server: live, status: terminated, agent: claude, pane: {{cwd: {ws.root}}},"
        " exit_status: 1, last_output: [starting, 'Traceback (most recent call last):', 'KeyError: \"API_KEY\"'],"
        " ended_at: '2026-12-05T10:00:00Z', restored_at: '2026-12-05T09:00:00Z'}\n"
        "  - {name: killed, server: live, status: terminated, exit_signal: 9, last_output: []}\n"
        "  - {name: before, server: live, status: running, exit_status: 2, last_output: [old],"
        " ended_at: '2026-12-05T07:59:59Z', restored_at: '2026-12-05T08:00:00Z'}\n")
    # (an end in the same second as the restore counts as the new run's: times have whole seconds, and an agent that
    # dies at once after its restore must count towards a crash loop)
    ws.herdr.start("live")
    ws.herdr.set_agents("live", [])
    env = {**ws.env, "MAM_ATTACH_ECHO": "1"}
    for args in (("peek", "crashed"), ("send", "crashed", "hello"), ("attach", "crashed"),
                 ("wait", "crashed", "--until", "idle", "--timeout", "1")):
        proc = ws.mam(*args, env=env)
        assert proc.returncode == 1, (args, proc.stderr)
        assert proc.stderr.splitlines() == [
            "mam: crashed is not running on herdr server live; crashed exited with status 1; its last output: "
            "'Traceback (most recent call last):', 'KeyError: \"API_KEY\"'",
            "hint: `mam restore crashed` starts it again from its launch spec (`--dry-run` shows how)"], args
    proc = ws.mam("peek", "killed")
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        "mam: killed is not running on herdr server live; killed was killed by signal 9",
        "hint: `mam --backend herdr spawn killed --server live ...` starts it again (its row keeps no launch spec "
        "for `mam restore`)"]
    proc = ws.mam("peek", "before")  # restored since it exited with status 2: that is not how it ends now
    assert proc.returncode == 1 and "status 2" not in proc.stderr and "old" not in proc.stderr
    ws.herdr.stop("live")
    proc = ws.mam("send", "crashed", "hello")
    assert proc.returncode == 1 and proc.stderr.splitlines()[0] == (
        "mam: herdr server live is down; mam send never starts it; crashed exited with status 1; its last output: "
        "'Traceback (most recent call last):', 'KeyError: \"API_KEY\"'")
