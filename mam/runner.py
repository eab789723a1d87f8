"""Running a backend's CLI: explicit argv, never a shell, always a time limit."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from mam.plugin.records import CommandResult, Failure

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0
# How long a killed process may take to be reaped. Its pipes are not waited for: a tmux client hands its
# stdout to the server, so a hung (e.g. SIGSTOPped) server holds them open after the client is dead.
REAP_GRACE = 0.1

# The process groups of the calls in flight, so an interrupted command can end them all (each runs in its own
# session, where the terminal's Ctrl-C never reaches it). Once `kill_running` ran, nothing new starts.
_running: set[subprocess.Popen[str]] = set()
_running_lock = threading.Lock()
_stopping = False


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_running() -> None:
    """End every backend process still running, and refuse to start more: for an interrupted command."""
    global _stopping
    with _running_lock:
        _stopping = True
        procs = list(_running)
    for proc in procs:
        _kill_group(proc)


def _abandon(proc: subprocess.Popen[str]) -> None:
    """Reap a killed process briefly and close our ends of its pipes without reading them to EOF."""
    try:
        proc.wait(timeout=REAP_GRACE)
    except subprocess.TimeoutExpired:
        pass
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def run(argv: Sequence[str], *, timeout: float, env: Mapping[str, str], cwd: str | None = None) -> CommandResult:
    """Run `argv` to completion or until `timeout` seconds, then kill it and everything it started.

    It gets its own process group so that a timeout takes its children too, and stdin from /dev/null so that
    it can never wait for a terminal.
    """
    args = tuple(argv)
    interrupted = CommandResult(args, None, timeout=timeout, os_error=f"{args[0]}: not started: interrupted")
    if _stopping:
        return interrupted
    try:  # not under the lock: the parallel queries of a status must not start their clients one at a time
        proc = subprocess.Popen(  # noqa: S603 - explicit argv, no shell
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env),
            cwd=cwd, text=True, encoding="utf-8", errors="replace", start_new_session=True)
    except FileNotFoundError:
        return CommandResult(args, None, not_found=True, timeout=timeout)
    except OSError as exc:
        return CommandResult(args, None, timeout=timeout, os_error=f"{args[0]}: {exc.strerror or exc}")
    with _running_lock:
        stopping = _stopping  # set while this one started: kill_running did not see it, so end it here
        if not stopping:
            _running.add(proc)
    if stopping:
        _kill_group(proc)
        _abandon(proc)
        return interrupted
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        _abandon(proc)
        return CommandResult(args, None, timed_out=True, timeout=timeout)
    except BaseException:  # an interrupt in this very thread: its child must not outlive mam
        _kill_group(proc)
        _abandon(proc)
        raise
    finally:
        with _running_lock:
            _running.discard(proc)
    return CommandResult(args, proc.returncode, stdout, stderr, timeout=timeout)


def first_line(text: str) -> str:
    """The first line of `text` that is not blank, stripped: what a multiplexer's error message says."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def poll_until(check: Callable[[], T | None], *, wait: float, interval: float = 0.05) -> T | None:
    """Call `check` until it returns something other than None, at most `wait` seconds (always at least once);
    None when the time ran out. For a bootstrap waiting until its new server answers."""
    import time

    deadline = time.monotonic() + wait
    while True:
        answer = check()
        if answer is not None or time.monotonic() >= deadline:
            return answer
        time.sleep(interval)


def parse_or_failure(backend: str, server: str, result: CommandResult,
                     parse: Callable[[str], T]) -> T | Failure:
    """A backend call's answer: `parse(stdout)` when it exited 0 and parses, else the Failure to classify.
    `parse` raises ValueError on output it does not recognise."""
    if result.returncode != 0:
        return Failure(backend, server, result)
    try:
        return parse(result.stdout)
    except ValueError as exc:
        return Failure(backend, server, result, parse_error=str(exc))


def timeout_from_env(env: Mapping[str, str], var: str = "MAM_TIMEOUT", default: float = DEFAULT_TIMEOUT) -> float:
    from mam.errors import MamError

    raw = env.get(var)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise MamError("usage", f"${var}={raw}: expected a number of seconds between 0 and 3600")
    return value
