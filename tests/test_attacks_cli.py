"""Attack and accident cases of the command line itself: refused before anything runs, and no child left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import Tmux, Workspace


def _row(name: str, server: str, status: str = "running", backend: str = "tmux") -> str:
    return f'- {{"name": "{name}", "backend": "{backend}", "server": "{server}", "status": "{status}"}}\n'


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e-300", "0.05", "0"])
def test_watch_refuses_non_finite_and_tiny_intervals_before_any_pass(ws: Workspace, value: str) -> None:
    # A row whose server is down: one pass with --apply would write it terminated.
    ws.write_registry("version: 1\nsessions:\n" + _row("a", "gone", backend="herdr"))
    before = ws.registry.read_bytes()
    proc = ws.mam("reconcile", "--apply", "--watch", value, timeout=10)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("mam: --watch"), proc.stderr
    assert "internal error" not in proc.stderr
    assert ws.registry.read_bytes() == before


def test_once_and_watch_contradict(ws: Workspace) -> None:
    proc = ws.mam("reconcile", "--once", "--watch", "2", timeout=10)
    assert proc.returncode == 2
    assert "--once and --watch" in proc.stderr


@pytest.mark.parametrize("var", ["MAM_TIMEOUT", "MAM_BOOTSTRAP_TIMEOUT"])
def test_a_bad_timeout_is_refused_even_with_an_empty_registry(ws: Workspace, var: str) -> None:
    proc = ws.mam("status", env={**ws.env, var: "abc"})
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert f"${var}=abc" in proc.stderr


def _stopped_server(tmux: Tmux) -> tuple[str, int]:
    server = tmux.name()
    tmux.agent(server, "a")
    pid = int(tmux.run(server, "display-message", "-p", "#{pid}").stdout)
    os.kill(pid, signal.SIGSTOP)
    return server, pid


def _clients_of(server: str) -> list[int]:
    """Live tmux client processes naming `server`: what a killed or interrupted mam must not leave behind."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if server.encode() in argv and b"list-panes" in argv and state != "Z":
            found.append(int(entry.name))
    return found


def test_a_hung_server_answers_within_the_time_limit(ws: Workspace, tmux: Tmux) -> None:
    server, pid = _stopped_server(tmux)
    ws.write_registry("version: 1\nsessions:\n" + _row("a", server))
    # What the same status costs on this machine now while the server answers (start-up, registry, listing):
    # the least of three, taken under the same load as the hang (other tests run on parallel workers), so a
    # spike is no excuse and what is left below is the hang's own cost.
    os.kill(pid, signal.SIGCONT)
    samples = []
    for _ in range(3):
        started = time.monotonic()
        assert ws.mam_json("status", env={**ws.env, "MAM_TIMEOUT": "2"})["servers"][0]["state"] == "up"
        samples.append(time.monotonic() - started)
    baseline = min(samples)
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        doc = ws.mam_json("status", env={**ws.env, "MAM_TIMEOUT": "2"})
        elapsed = time.monotonic() - started - baseline
    finally:
        os.kill(pid, signal.SIGCONT)
    assert doc["servers"][0]["state"] == "unknown"
    assert doc["servers"][0]["error"]["kind"] == "timeout"
    assert doc["sessions"][0]["live"] == "unknown"
    # The limit plus the kill, start-up taken out; it was the limit plus 2 s while mam waited on the server's
    # pipes. The margin (1.8 s) is for a loaded 2-core machine (1.2 s was missed by 12 ms at load 12); the old
    # bug needed at least 4 s.
    assert elapsed < 3.8, (elapsed, baseline)


def _default_signals() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _status_asking(ws: Workspace, servers: list[str], *args: str,
                   preexec: Callable[[], None] = _default_signals) -> subprocess.Popen[bytes]:
    """`mam status ARGS` (30 s limit), once a client of it waits on each of `servers`. By default it runs as
    from a terminal: under `nohup` (the suite may be) SIGHUP would be ignored, and mam keeps it so."""
    proc = subprocess.Popen([sys.executable, "-m", "mam", "status", *args], env={**ws.env, "MAM_TIMEOUT": "30"},
                            cwd=ws.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=preexec)
    deadline = time.monotonic() + 10
    while not all(_clients_of(s) for s in servers):
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("mam never asked the servers")
        time.sleep(0.02)
    return proc


def test_sigint_during_status_leaves_no_backend_process(ws: Workspace, tmux: Tmux) -> None:
    stopped = [_stopped_server(tmux) for _ in range(2)]  # two servers: the queries run on threads
    ws.write_registry("version: 1\nsessions:\n" + "".join(_row(f"a{i}", s) for i, (s, _) in enumerate(stopped)))
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = _status_asking(ws, [s for s, _ in stopped])
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=5)
        assert proc.returncode == 130, stderr
        assert b"interrupted" in stderr
        time.sleep(0.2)
        assert [c for s, _ in stopped for c in _clients_of(s)] == []
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        for _, pid in stopped:
            os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_during_status_leave_no_backend_process(ws: Workspace, tmux: Tmux, signum: int) -> None:
    server, pid = _stopped_server(tmux)
    ws.write_registry("version: 1\nsessions:\n" + _row("a", server))
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = _status_asking(ws, [server])
        proc.send_signal(signum)
        proc.communicate(timeout=5)
        assert proc.returncode == 128 + signum
        # Killed as mam exits; on a loaded machine the kernel may take a moment to end them. A client left
        # running would still be here after these seconds: the server is stopped, so it never answers.
        deadline = time.monotonic() + 5
        while _clients_of(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _clients_of(server) == [], [_described(c) for c in _clients_of(server)]
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        os.kill(pid, signal.SIGCONT)


def test_under_nohup_a_hangup_leaves_the_status_to_finish(ws: Workspace, tmux: Tmux) -> None:
    """A SIGHUP the caller ignores (nohup, a script's `&`) stays ignored: the command finishes its work."""
    server, pid = _stopped_server(tmux)
    ws.write_registry("version: 1\nsessions:\n" + _row("a", server))

    def nohup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    try:
        proc = _status_asking(ws, [server], "--json", preexec=nohup)
        proc.send_signal(signal.SIGHUP)
    finally:
        os.kill(pid, signal.SIGCONT)  # the server answers now
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert json.loads(out)["sessions"][0]["live"] == "alive"


def _described(pid: int) -> str:
    """What a failure should show of a process left behind: its state, parent, group and session."""
    try:
        fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return f"{pid}: gone"
    return f"{pid}: state {fields[0]}, parent {fields[1]}, group {fields[2]}, session {fields[3]}"


def test_pane_text_never_reaches_the_terminal_raw(ws: Workspace, tmux: Tmux) -> None:
    """An agent kind or a path set from inside a pane cannot retitle, clear or reprogram the reader's terminal."""
    server = tmux.name()
    tmux.agent(server, "a")
    tmux.run(server, "set-option", "-t", "a", "@mam_agent", "\x1b]0;PWNED\x07\x1b[2J\x9b31m")
    ws.write_registry("version: 1\nsessions:\n" + _row("a", server))
    for args in (["status"], ["ls", "--server", server]):
        out = ws.mam(*args).stdout
        assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out, out
        assert "\\x1b]0;PWNED\\x07\\x1b[2J" in out


def test_a_long_status_says_what_it_waits_for_on_a_terminal(ws: Workspace, tmux: Tmux) -> None:
    import pty
    import select

    server, pid = _stopped_server(tmux)
    ws.write_registry("version: 1\nsessions:\n" + _row("a", server))
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "mam", "status"], env={**ws.env, "MAM_TIMEOUT": "2"},
                            cwd=ws.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 10
        while b"asking the servers" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break
        proc.communicate(timeout=10)
    finally:
        os.close(master)
        proc.kill()
        os.kill(pid, signal.SIGCONT)
    assert b"mam: asking the servers for their agents (1 s)..." in seen, seen


def test_a_call_started_while_mam_is_interrupted_is_ended_not_left_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """Popen runs outside the lock (the parallel queries must not start one at a time): a process that started
    while kill_running ran, unseen by it, is ended by its own call."""
    from mam.calls import runner

    monkeypatch.setattr(runner, "_stopping", False)
    started: list[subprocess.Popen[str]] = []
    real = subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[str]:
        proc = real(*args, **kwargs)
        started.append(proc)
        runner.kill_running()  # the interrupt lands between the start and the bookkeeping
        return proc

    monkeypatch.setattr(runner.subprocess, "Popen", popen)
    result = runner.run(["sleep", "30"], timeout=5, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode is None and "interrupted" in (result.os_error or "")
    assert started and started[0].poll() is not None  # killed and reaped, not left sleeping
    assert not runner._running
    assert "interrupted" in (runner.run(["true"], timeout=5, env={}).os_error or "")  # nothing new starts


def test_a_signal_while_the_main_thread_starts_a_call_waits_until_its_process_is_known(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGTERM that lands just after Popen made the process, before mam registered it, would leave that
    process running after mam: the CLI's handler holds it until the process is registered, then raises."""
    import importlib

    from mam.calls import runner

    main = importlib.import_module("mam.cli.main")  # the module: mam.cli's `main` is its function
    monkeypatch.setattr(runner, "_stopping", False)
    previous = signal.signal(signal.SIGTERM, main._on_signal)
    started: list[subprocess.Popen[str]] = []
    real = subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[str]:
        proc = real(*args, **kwargs)
        started.append(proc)
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs here, in the main thread, at once
        return proc

    monkeypatch.setattr(runner.subprocess, "Popen", popen)
    try:
        with pytest.raises(main.Terminated):
            runner.run(["sleep", "30"], timeout=5, env={"PATH": "/usr/bin:/bin"})
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert started and started[0].poll() is not None  # killed and reaped, not left sleeping
    assert not runner._running and runner._starting == 0


def test_a_signal_held_and_never_raised_does_not_fire_in_a_later_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A held signal that a second one overtook is spent: it must not end some later, unrelated call."""
    import importlib

    from mam.calls import runner

    main = importlib.import_module("mam.cli.main")
    monkeypatch.setattr(runner, "_stopping", False)
    monkeypatch.setattr(runner, "_held", [signal.SIGTERM])  # left over, as a signal raised first leaves it
    previous = signal.signal(signal.SIGTERM, main._on_signal)
    try:
        result = runner.run(["true"], timeout=5, env={"PATH": "/usr/bin:/bin"})
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert result.returncode == 0
