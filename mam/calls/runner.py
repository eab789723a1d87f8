"""Running a backend's CLI: explicit argv, never a shell, always a time limit, and nothing left running when
mam is interrupted. Where a call runs (here, or another host: mam.calls.route) is decided by whoever enters a place
for the calls (`running_elsewhere`); this module only runs processes on this machine."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

from mam.config.settings import DEFAULT_MAX_OUTPUT
from mam.plugin.records import CommandResult

# The most bytes one backend call may print (stdout and stderr together) before it is killed and its answer is
# `unknown`: a hostile or broken server must not fill this machine's memory. $MAM_MAX_OUTPUT sets it per command.
_max_output = DEFAULT_MAX_OUTPUT
READ_CHUNK = 65536
# How long a killed process may take to be reaped. Its pipes are not waited for: a tmux client hands its
# stdout to the server, so a hung (e.g. SIGSTOPped) server holds them open after the client is dead.
REAP_GRACE = 0.1

# The process groups of the calls in flight, so an interrupted command can end them all (each runs in its own
# session, where the terminal's Ctrl-C never reaches it). Once `kill_running` ran, nothing new starts.
_running: set[subprocess.Popen[bytes]] = set()
_running_lock = threading.Lock()
_stopping = False
_starting = 0  # calls between their check of _stopping and their registration in _running
# A signal that reached the main thread while it was between starting a process and registering it: raised once
# it is registered (see defer_signal), for an exception there would leave a process nobody knows of.
_main_starting = False
_held: list[int] = []


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def defer_signal(signum: int) -> bool:
    """For the CLI's signal handlers (which Python runs in the main thread): True when the main thread is
    starting a backend process, so the signal is held and raised as soon as that process is registered."""
    if _main_starting:
        _held.append(signum)
        return True
    return False


@contextmanager
def _starting_here() -> Iterator[None]:
    """Around Popen and the registration of its process: in the main thread, signals wait until the end."""
    global _main_starting
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _held.clear()  # one held by an earlier call and never raised (a second signal raised first) is spent
    _main_starting = True
    try:
        yield
    finally:
        _main_starting = False
        if _held:
            # SIGTERM or SIGHUP over a Ctrl-C held with it: the stronger request decides the exit status.
            signum = next((s for s in _held if s != signal.SIGINT), _held[0])
            _held.clear()
            handler = signal.getsignal(signum)
            if callable(handler):
                handler(signum, None)  # raises, now that the process is known to kill_running


def kill_running() -> None:
    """End every backend process still running, and refuse to start more: for an interrupted command."""
    global _stopping
    with _running_lock:
        _stopping = True
    # A call may be starting its process right now: wait (briefly) until it is registered, or mam could exit
    # before that call's own thread sees _stopping, and its process would outlive mam.
    deadline = time.monotonic() + 1.0
    while True:
        with _running_lock:
            if _starting == 0 or time.monotonic() > deadline:
                procs = list(_running)
                break
        time.sleep(0.002)
    for proc in procs:
        _kill_group(proc)


def _abandon(proc: subprocess.Popen[bytes]) -> None:
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


class Elsewhere(Protocol):
    """A place other than this machine that runs the calls made inside `running_elsewhere` (mam.calls.route.Route)."""

    def run(self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str],
            stdin: bytes | None = None) -> CommandResult: ...


# Where the calls made in this context run; None: this machine. A context variable, so that parallel queries of
# different hosts each see their own; new threads start without one (mam.calls.route.with_route).
_elsewhere: ContextVar[Elsewhere | None] = ContextVar("mam_route", default=None)


def elsewhere() -> Elsewhere | None:
    return _elsewhere.get()


@contextmanager
def running_elsewhere(place: Elsewhere | None) -> Iterator[None]:
    """Every `run` inside goes to `place` (None: runs here), in this thread and context only."""
    token = _elsewhere.set(place)
    try:
        yield
    finally:
        _elsewhere.reset(token)


def run(argv: Sequence[str], *, timeout: float, env: Mapping[str, str], cwd: str | None = None,
        stdin: bytes | None = None) -> CommandResult:
    """Run `argv` to completion or until `timeout` seconds, then kill it and everything it started: here, or
    where the calls of this context go (mam.calls.route: another host, through ssh).

    It gets its own process group so that a timeout takes its children too, and stdin from /dev/null so that
    it can never wait for a terminal; or, when `stdin` is given, those bytes and then end of file (a text too
    long for an argument, e.g. `tmux load-buffer -`).
    """
    place = _elsewhere.get()
    if place is not None:
        return place.run(argv, timeout=timeout, env=env) if stdin is None else \
            place.run(argv, timeout=timeout, env=env, stdin=stdin)
    return run_local(argv, timeout=timeout, env=env, cwd=cwd, stdin=stdin)


def _start(args: tuple[str, ...], env: Mapping[str, str], cwd: str | None,
           timeout: float, piped: bool = False) -> subprocess.Popen[bytes] | CommandResult:
    """The started process, counted in _starting (its caller registers it), or why none started."""
    global _starting
    with _running_lock:
        if _stopping:
            return CommandResult(args, None, timeout=timeout, os_error=f"{args[0]}: not started: interrupted")
        _starting += 1
    try:  # not under the lock: the parallel queries of a status must not start their clients one at a time
        return subprocess.Popen(  # noqa: S603 - explicit argv, no shell
            args, stdin=subprocess.PIPE if piped else subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=dict(env), cwd=cwd, start_new_session=True)
    except FileNotFoundError:
        with _running_lock:
            _starting -= 1
        return CommandResult(args, None, not_found=True, timeout=timeout)
    except OSError as exc:
        with _running_lock:
            _starting -= 1
        return CommandResult(args, None, timeout=timeout, os_error=f"{args[0]}: {exc.strerror or exc}")
    except BaseException:  # e.g. a NUL in an argument: nothing started
        with _running_lock:
            _starting -= 1
        raise


def _await_exit(proc: subprocess.Popen[bytes], deadline: float, timeout: float) -> None:
    """Wait until `proc` has ended (its pipes are closed), by the deadline at the latest (TimeoutExpired), on its
    pidfd (Linux): Popen.wait with a time limit polls in sleeps that double from 0.5 ms, and a tmux client
    closes its pipes a moment before it exits (bench/RESULTS.md). Where there is no pidfd, Popen.wait polls."""
    try:
        exited = os.pidfd_open(proc.pid)  # not reaped yet, so the pid is still this process's
    except (AttributeError, OSError):
        return
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(exited, selectors.EVENT_READ)
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(exited)


def _communicate(proc: subprocess.Popen[bytes], timeout: float, limit: int,
                 stdin: bytes | None = None) -> tuple[str, str] | None:
    """`proc`'s stdout and stderr once it ended, read as bytes in chunks (never more than `limit` bytes in all:
    None when it printed more) and decoded as UTF-8 without newline translation: a tmux field may hold a raw
    `\r`, which universal newlines would turn into a line break. TimeoutExpired at `timeout` seconds. `stdin`
    is written as the process takes it (never blocking the reads), then closed."""
    deadline = time.monotonic() + timeout
    chunks: dict[int, list[bytes]] = {}
    total = 0
    pending = memoryview(stdin or b"")
    with selectors.DefaultSelector() as selector:
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            selector.register(stream.fileno(), selectors.EVENT_READ)
            chunks[stream.fileno()] = []
        stdin_fd = proc.stdin.fileno() if proc.stdin is not None else None
        if stdin_fd is not None:
            os.set_blocking(stdin_fd, False)
            selector.register(stdin_fd, selectors.EVENT_WRITE)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout)
            for key, _events in selector.select(left):
                if key.fd == stdin_fd and proc.stdin is not None:
                    try:
                        pending = pending[os.write(key.fd, pending[:READ_CHUNK]):] if pending else pending
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:  # it stopped reading: the rest is not taken
                        pending = memoryview(b"")
                    if not pending:
                        selector.unregister(key.fd)
                        proc.stdin.close()
                    continue
                data = os.read(key.fd, min(READ_CHUNK, limit - total + 1))
                if not data:
                    selector.unregister(key.fd)
                    continue
                total += len(data)
                if total > limit:
                    return None
                chunks[key.fd].append(data)
    _await_exit(proc, deadline, timeout)
    proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
    assert proc.stdout is not None and proc.stderr is not None
    out, err = (b"".join(chunks[s.fileno()]).decode("utf-8", "replace") for s in (proc.stdout, proc.stderr))
    return out, err


def over_limit(program: str, limit: int) -> str:
    """Why a call's answer is unknown when it printed more than `limit` bytes."""
    return (f"{program} printed more than {limit} bytes, the limit of one answer ($MAM_MAX_OUTPUT): stopped "
            "and not read")


def run_local(argv: Sequence[str], *, timeout: float, env: Mapping[str, str],
              cwd: str | None = None, limit: int | None = None, stdin: bytes | None = None) -> CommandResult:
    """`argv` on this machine, whatever the context's route; at most `limit` bytes of output (max_output());
    `stdin` as its input (None: /dev/null)."""
    args = tuple(argv)
    interrupted = CommandResult(args, None, timeout=timeout, os_error=f"{args[0]}: not started: interrupted")
    global _starting
    proc: subprocess.Popen[bytes] | None = None
    try:
        with _starting_here():
            started = _start(args, env, cwd, timeout, piped=stdin is not None)
            if isinstance(started, CommandResult):
                return started
            proc = started
            with _running_lock:
                # Registered even when stopping, so that kill_running (which waits for _starting) ends it too.
                _running.add(proc)
                _starting -= 1
                stopping = _stopping  # set while this one started: end it here as well
    except BaseException:  # a signal held while it started: raised now, and its process ends here too
        if proc is not None:
            _kill_group(proc)
            _abandon(proc)
            with _running_lock:
                _running.discard(proc)
        raise
    if stopping:
        _kill_group(proc)
        _abandon(proc)
        with _running_lock:
            _running.discard(proc)
        return interrupted
    limit = _max_output if limit is None else limit
    try:
        output = _communicate(proc, timeout, limit, stdin)
        if output is None:
            _kill_group(proc)
            _abandon(proc)
            return CommandResult(args, None, timeout=timeout, os_error=over_limit(args[0], limit), over_limit=True)
        stdout, stderr = output
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


def max_output() -> int:
    return _max_output


def set_max_output(limit: int) -> None:
    """The limit of every backend call's output from now on (the command's $MAM_MAX_OUTPUT)."""
    global _max_output
    _max_output = limit
