"""`mam watch` (--json, --notify, --exec), `mam status --watch` and `mam stop --all`: on real tmux with stand-in
agents, and the change tracking (mam.live.changes) on its own. The desktop is a fake notify-send on PATH that records
its argv; the user's command records what it got on stdin."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import Tmux, Workspace
from mam.live.changes import Changes, change_text

STANDIN = str(Path(__file__).parent / "agents" / "standin.py")
RECORDER = "import sys; open(sys.argv[1], 'a').write(repr(sys.argv[2:]) + '\\n' + sys.stdin.read())"


def spawn(ws: Workspace, name: str, server: str, *args: str) -> None:
    proc = ws.mam("spawn", name, "--agent", "claude", "--server", server, "--command", sys.executable, "--",
                  STANDIN, *args)
    assert proc.returncode == 0, proc.stderr


def bin_with(tmp: Path, *programs: str) -> Path:
    """A PATH folder with only tmux and `programs` (each a script recording its argv and stdin): no system
    notify-send can answer in place of the fake."""
    folder = tmp / "bin"
    folder.mkdir(exist_ok=True)
    tmux = shutil.which("tmux")
    assert tmux is not None
    (folder / "tmux").symlink_to(tmux)
    for program in programs:
        script = folder / program
        script.write_text(f"#!{sys.executable}\n{RECORDER.replace('sys.argv[1]', repr(str(tmp / program)))}"
                          .replace("sys.argv[2:]", "sys.argv[1:]"))
        script.chmod(0o755)
    return folder


def watch(ws: Workspace, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """`mam watch`, once it has read its baseline (it says so on stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "mam", "watch", "--interval", "0.3", *args], env=env,
                            cwd=ws.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True)
    assert proc.stderr is not None
    started = proc.stderr.readline()
    assert started.startswith("mam: watching "), started
    return proc


def working(ws: Workspace, name: str, server: str) -> None:
    """A stand-in that shows `working` until `go` is typed into it, then `blocked`; back once it is working."""
    spawn(ws, name, server, "claude", "working", "--then", "blocked", "--when-typed", "go")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = {s["name"]: s["state"] for s in ws.mam_json("status")["sessions"]}
        if found.get(name) == "working":
            return
        time.sleep(0.2)
    raise AssertionError(f"{name} never showed working")


def go(ws: Workspace, name: str) -> None:
    assert ws.mam("send", name, "go", "--enter").returncode == 0


def until_file(path: Path, seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.1)
    return path.read_text() if path.exists() else ""


def interrupt(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def test_watch_tells_a_change_into_blocked_once_by_json_notify_and_exec(ws: Workspace, tmux: Tmux,
                                                                       tmp_path: Path) -> None:
    server = tmux.name()
    spawn(ws, "steady", server, "claude", "idle")  # never changes: never told
    working(ws, "turner", server)
    env = {**ws.env, "PATH": str(bin_with(tmp_path, "notify-send"))}
    got = tmp_path / "got.txt"
    proc = watch(ws, env, "--json", "--notify", "--exec", f"{sys.executable} -c \"{RECORDER}\" {got} 'two words'")
    try:
        go(ws, "turner")
        text = until_file(got)
        time.sleep(1.5)  # a few more passes: the same state is never told twice
    finally:
        code, out, err = interrupt(proc)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 1, (out, err)
    change = json.loads(lines[0])
    assert (change["name"], change["from"], change["to"], change["server"]) == ("turner", "working", "blocked",
                                                                                server)
    assert change["evidence"]["rule"] == "claude.permission" and change["host"] is None
    # The user's command: its argv as given (quotes kept together, no shell), the change on its stdin, once.
    argv_line, stdin = text.split("\n", 1)
    assert argv_line == repr(["two words"])
    assert json.loads(stdin) == change and stdin.count("\n") == 1
    notified = (tmp_path / "notify-send").read_text().splitlines()
    assert notified == [repr(["--app-name=mam", "--urgency=critical", "--", "mam: turner is blocked",
                              f"tmux server {server}: Do you want to proceed?"])]
    assert "\a" not in err  # notify-send told it: no bell


def test_watch_rings_the_bell_without_notify_send_and_survives_a_failing_command(ws: Workspace, tmux: Tmux,
                                                                                 tmp_path: Path) -> None:
    server = tmux.name()
    working(ws, "turner", server)
    env = {**ws.env, "PATH": str(bin_with(tmp_path))}
    proc = watch(ws, env, "--notify", "--exec", f"{sys.executable} -c 'import sys; sys.exit(3)'")
    try:
        go(ws, "turner")
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()  # the change, told as a line
        said = proc.stderr.readline()  # then the bell, and what the failing command did
    finally:
        code, out, err = interrupt(proc)
    assert code == 0
    assert "turner (tmux server" in line and "working -> blocked" in line and "claude.permission" in line
    assert "\a" in said and "--exec" in said and "exit status 3" in said


def test_watch_tells_an_agent_whose_program_finished_as_done(ws: Workspace, tmux: Tmux) -> None:
    """`mam wait --until done` is met by an agent whose program exited 0, and `watch`'s default `done` is "it has
    finished": its gone screen reads `unknown`, which a watch passed over, telling nothing."""
    server = tmux.name()
    proc = ws.mam("spawn", "quitter", "--server", server, "--command", "sh -c 'sleep 2; echo all done'")
    assert proc.returncode == 0, proc.stderr
    watcher = watch(ws, ws.env, "--json")
    try:
        assert ws.mam("wait", "quitter", "--until", "done", "--timeout", "30").returncode == 0
        time.sleep(1.5)  # a few passes of the watch: told once
    finally:
        code, out, err = interrupt(watcher)
    assert code == 0, err
    told = [json.loads(line) for line in out.splitlines()]
    assert [(c["name"], c["to"]) for c in told] == [("quitter", "done")], (out, err)


def test_watch_refuses_bad_input(ws: Workspace) -> None:
    for args, word in ((["--on", "soon"], "--on soon"), (["--interval", "0"], "--interval 0"),
                       (["--exec", "'open"], "No closing quotation"), (["--exec", ""], "empty command")):
        proc = ws.mam("watch", *args)
        assert proc.returncode == 2 and word in proc.stderr, (args, proc.stderr)


def session(name: str, state: str | None, server: str = "s") -> dict[str, Any]:
    return {"name": name, "backend": "tmux", "server": server, "host": None, "state": state,
            "state_source": "screen", "evidence": {"rule": "r", "line": "l", "fact": None}}


def test_changes_start_from_a_baseline_and_ignore_one_unknown_poll() -> None:
    track = Changes()
    assert track.step([session("a", "blocked"), session("b", "working")]) == []  # what they already are
    assert track.step([session("a", "blocked"), session("b", "blocked")], now=0)[0]["from"] == "working"
    assert track.step([session("a", "unknown"), session("b", "unknown")]) == []  # a server missed one poll
    assert track.step([session("a", "blocked"), session("b", "blocked")]) == []  # still blocked: not again
    done = track.step([session("a", "done"), session("b", "working"), session("c", "blocked")], now=0)
    assert [(c["name"], c["from"], c["to"]) for c in done] == [("a", "blocked", "done"), ("c", None, "blocked")]
    assert done[0]["at"] == "1970-01-01T00:00:00Z"
    assert change_text(done[1]) == "00:00:00 c (tmux server s): new -> blocked: r: 'l'"
    watched = Changes(["working", "unknown"])
    watched.step([session("a", "idle")])
    assert [c["to"] for c in watched.step([session("a", "unknown")])] == ["unknown"]
    assert watched.step([session("a", None)]) == []  # --no-state: nothing to compare
    ended = Changes()  # a program that exited 0: done, once, whatever its gone screen reads
    ended.step([session("a", "working")])
    assert [c["to"] for c in ended.step([{**session("a", "unknown"), "end": "finished"}])] == ["done"]
    assert ended.step([{**session("a", "unknown"), "end": "finished"}]) == []
    assert ended.step([{**session("a", "unknown"), "end": "failed"}]) == []  # a failure is no `done`


def test_an_agent_that_appears_reading_unknown_has_no_state_before_its_first() -> None:
    """A row that appears since the baseline (a spawn: its screen not drawn yet reads unknown) changes `from`
    null, as docs/json.md says, never from `unknown`; the baseline's own unknown is what it read."""
    track = Changes()
    assert track.step([session("a", "unknown")]) == []
    assert track.step([session("a", "unknown"), session("new", "unknown")]) == []
    told = track.step([session("a", "blocked"), session("new", "blocked")], now=0)
    assert [(c["name"], c["from"], c["to"]) for c in told] == [("a", "unknown", "blocked"), ("new", None, "blocked")]
    assert change_text(told[1]) == "00:00:00 new (tmux server s): new -> blocked: r: 'l'"
    # Watched, unknown is a state like any other: the new row's first reading is told.
    watched = Changes(["unknown", "blocked"])
    watched.step([])
    assert [(c["from"], c["to"]) for c in watched.step([session("b", "unknown")])] == [(None, "unknown")]
    assert [(c["from"], c["to"]) for c in watched.step([session("b", "blocked")])] == [("unknown", "blocked")]


def test_status_watch_repeats_the_table_and_json_lines_until_ctrl_c(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    spawn(ws, "seen", server, "claude", "idle")
    for args in (["--watch", "0.2"], ["--watch", "0.2", "--json"], ["--json", "--watch"]):
        proc = subprocess.Popen([sys.executable, "-m", "mam", "status", *args], env=ws.env, cwd=ws.root,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        first = [proc.stdout.readline() for _ in range(2 if "--json" in args else 9)]  # two passes
        code, _, err = interrupt(proc)
        assert code == 0, err
        if "--json" in args:
            docs = [json.loads(line) for line in first]
            assert all(d["sessions"][0]["name"] == "seen" for d in docs)
        else:
            text = "".join(first)
            assert first[0].startswith("--- ") and text.count("--- ") == 2 and "seen" in text, text
            assert "\x1b" not in text  # into a pipe: no cursor movement
    bad = ws.mam("status", "--watch", "0")
    assert bad.returncode == 2 and "--watch 0" in bad.stderr


def run_in_pty(argv: list[str], env: dict[str, str], cwd: Path, typed: bytes = b"", until: str = "",
               timeout: float = 60) -> tuple[int, str]:
    """Run `argv` on a new pty (never the test's terminal) until it exits, typing `typed` once `until` shows."""
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(cwd)
        os.execve(argv[0], argv, env)
    out, sent, deadline = b"", False, time.monotonic() + timeout
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
            if not sent and until in out.decode(errors="replace"):
                if typed:
                    os.write(fd, typed)
                sent = True
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status), out.decode(errors="replace")
    finally:
        os.close(fd)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_status_watch_redraws_in_place_on_a_terminal(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    spawn(ws, "seen", server, "claude", "idle")
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(ws.root)
        os.execve(sys.executable, [sys.executable, "-m", "mam", "status", "--watch", "0.2"], ws.env)
    out = b""
    deadline = time.monotonic() + 60
    try:
        while out.count(b"\x1b[H") < 2 and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                out += os.read(fd, 65536)
        os.kill(pid, signal.SIGINT)
        while True:
            ready, _, _ = select.select([fd], [], [], 5)
            try:
                chunk = os.read(fd, 65536) if ready else b""
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    text = out.decode(errors="replace")
    assert text.count("\x1b[H") >= 2 and "\x1b[J" in text and "seen" in text  # home, draw, erase below


def test_stop_all_asks_refuses_without_a_terminal_and_stops_in_scope(ws: Workspace, tmux: Tmux) -> None:
    one, two = tmux.name(), tmux.name()
    for name, server in (("a1", one), ("a2", one), ("b1", two)):
        assert ws.mam("spawn", name, "--server", server, "--command", "sleep 600").returncode == 0
    refused = ws.mam("stop", "--all")  # stdin is not a terminal, and no --yes
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert ws.mam("stop", "--all", "a1", "--yes").returncode == 2
    assert ws.mam("stop").returncode == 2
    sessions = {s["name"]: s["status"] for s in ws.mam_json("status")["sessions"]}
    assert sessions == {"a1": "running", "a2": "running", "b1": "running"}  # nothing was stopped
    # At a terminal: the question names them; anything but y stops nothing.
    env = {**ws.env, "TERM": "dumb"}
    code, out = run_in_pty([sys.executable, "-m", "mam", "stop", "--all", "--server", two], env, ws.root, b"n\n",
                           "[y/N]")
    assert code == 1 and "b1 (tmux server" in out and "not confirmed" in out
    code, out = run_in_pty([sys.executable, "-m", "mam", "stop", "--all", "--server", two], env, ws.root, b"y\n",
                           "[y/N]")
    assert code == 0 and "b1 on tmux server" in out and "stopped" in out
    doc = ws.mam_json("stop", "--all", "--yes")
    assert [(a["name"], a["outcome"]) for a in doc["agents"]] == [("a1", "stopped"), ("a2", "stopped")]
    assert doc["counts"] == {"stopped": 2, "terminated": 0, "failed": 0, "left": 0}
    assert {s["name"]: s["status"] for s in ws.mam_json("status")["sessions"]} == {
        "a1": "stopped", "a2": "stopped", "b1": "stopped"}
    assert "a1" not in tmux.run(one, "list-sessions", check=False).stdout  # closed
    assert ws.mam_json("stop", "--all", "--yes")["agents"] == []  # nothing left running


@pytest.mark.parametrize("verb", ["peek", "attach", "wait"])
def test_the_verbs_refuse_a_name_with_no_row(ws: Workspace, verb: str) -> None:
    extra = ["--until", "idle"] if verb == "wait" else []
    proc = ws.mam(verb, "ghost", *extra, env={**ws.env, "MAM_ATTACH_ECHO": "1"})
    assert proc.returncode == 1 and "no registered agent named ghost" in proc.stderr
