"""Running a backend's CLI: explicit argv, never a shell, always a time limit."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from mam.plugin.records import CommandResult, ErrorKind, Failure, ServerError

if TYPE_CHECKING:  # the transport is imported only by a command that reaches another host
    from mam.batch import Batch
    from mam.transport import SshTransport

T = TypeVar("T")
P = ParamSpec("P")

DEFAULT_TIMEOUT = 10.0
# The most bytes one backend call may print (stdout and stderr together) before it is killed and its answer is
# `unknown`: a hostile or broken server must not fill this machine's memory. $MAM_MAX_OUTPUT sets it per command.
DEFAULT_MAX_OUTPUT = 16 * 1024 * 1024
MAX_OUTPUT_BOUNDS = (4096, 1024 ** 3)
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


# What the local ssh client runs with: enough to find itself, its config and keys (agent) and a locale, nothing
# a user's `SendEnv` could forward (the caller's markers never leave this machine).
SSH_CLIENT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SSH_AUTH_SOCK", "KRB5CCNAME", "LANG", "TERM")


@dataclass(frozen=True)
class Route:
    """Where the current backend calls run: through `transport` on another host, with `env_unset` (names and
    PREFIX_* patterns) unset and `env_set` set on the remote side of every call."""

    transport: SshTransport
    env_unset: tuple[str, ...] = ()
    env_set: Mapping[str, str] = field(default_factory=dict)
    batch: Batch | None = field(default=None, compare=False)  # calls made together share one ssh session

    def batched(self, expected: int | None = None, window: float | None = None) -> Route:
        """This route for one fan-out of queries: the calls made together (`expected` of them, or those within
        `window` seconds of the first) run in one ssh session on the host (mam.batch). Never for a call that
        changes anything: a batch whose answer does not parse runs each call again on its own."""
        from dataclasses import replace

        from mam.batch import Batch

        return replace(self, batch=Batch(expected, window))

    @property
    def host(self) -> str:
        return self.transport.host

    def client_argv(self, argv: Sequence[str]) -> list[str]:
        """The local argv of an interactive client (attach, `mam exec`) on the host: ssh with a terminal."""
        return self.transport.wrap(argv, self.env_unset, self.env_set, tty=True)

    def ssh_env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in env.items() if k in SSH_CLIENT_ENV or k.startswith("LC_")}


# The route of the calls made in this context; None: this machine. A context variable, so that parallel queries
# of different hosts each see their own; new threads start without one (see with_route).
_route: ContextVar[Route | None] = ContextVar("mam_route", default=None)


def current_route() -> Route | None:
    return _route.get()


@contextmanager
def remote_route(route: Route | None) -> Iterator[Route | None]:
    """Every `run` inside goes through `route` (None: runs here), in this thread and context only."""
    token = _route.set(route)
    try:
        yield route
    finally:
        _route.reset(token)


def with_route(route: Route | None, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` under `route`: for a worker thread, which does not inherit the caller's context."""
    with remote_route(route):
        return fn(*args, **kwargs)


def run(argv: Sequence[str], *, timeout: float, env: Mapping[str, str], cwd: str | None = None,
        stdin: bytes | None = None) -> CommandResult:
    """Run `argv` to completion or until `timeout` seconds, then kill it and everything it started: here, or
    on the current route's host through ssh (see _run_remote).

    It gets its own process group so that a timeout takes its children too, and stdin from /dev/null so that
    it can never wait for a terminal; or, when `stdin` is given, those bytes and then end of file (a text too
    long for an argument, e.g. `tmux load-buffer -`).
    """
    route = _route.get()
    if route is not None and route.batch is not None and stdin is None:  # a batch shares one stdin: never
        return route.batch.run(route, argv, timeout=timeout, env=env)
    if route is not None:
        return _run_remote(route, argv, timeout=timeout, env=env, stdin=stdin)
    return _run_local(argv, timeout=timeout, env=env, cwd=cwd, stdin=stdin)


def _run_remote(route: Route, argv: Sequence[str], *, timeout: float, env: Mapping[str, str],
                limit: int | None = None, stdin: bytes | None = None) -> CommandResult:
    """`argv` on the route's host. The result is the remote command's, under the backend's own argv, as if it
    had run here; ssh's own failures come back as `transport_error` (never down), so no backend reads them.
    The remote command runs in the login's home directory (a `cwd` names a folder of this machine) and with
    the login's environment, less the scrub's markers: `env` is only for the local ssh client."""
    from mam.errors import MamError

    args = tuple(argv)
    host = route.host
    try:
        wrapped = route.transport.wrap(args, route.env_unset, route.env_set)
    except ValueError as exc:
        return CommandResult(args, None, timeout=timeout, os_error=f"{args[0] if args else '?'}: cannot run on "
                             f"{host}: {exc}")
    except MamError as exc:  # the folder of the shared connections is refused
        return CommandResult(args, None, timeout=timeout,
                             transport_error=ServerError(ErrorKind.UNKNOWN, f"ssh to {host}: {exc.message}"))
    limit = _max_output if limit is None else limit
    raw = route.transport.clean(_run_local(wrapped, timeout=timeout, env=route.ssh_env(env), limit=limit,
                                           stdin=stdin))
    if raw.os_error == over_limit(wrapped[0], limit):  # the remote command's answer, not ssh's failure
        return CommandResult(args, None, timeout=timeout, transport_error=ServerError(
            ErrorKind.UNKNOWN, f"ssh to {host}: {over_limit(args[0], limit)}"))
    error = route.transport.classify(raw)
    if error is not None:
        return CommandResult(args, None, "", raw.stderr, timeout=timeout, transport_error=error)
    if raw.timed_out:  # ssh or the remote command hung: the remote command may still run there
        return CommandResult(args, None, timed_out=True, timeout=timeout, transport_error=ServerError(
            ErrorKind.TIMEOUT, f"ssh to {host}: {args[0]} gave no answer within {timeout:g} s"))
    if raw.returncode is not None and raw.returncode < 0:
        return CommandResult(args, None, "", raw.stderr, timeout=timeout, transport_error=ServerError(
            ErrorKind.UNKNOWN, f"ssh to {host}: ssh was killed by signal {-raw.returncode}"))
    return _finish_remote(route, args, timeout, raw)


def _finish_remote(route: Route, args: tuple[str, ...], timeout: float, raw: CommandResult) -> CommandResult:
    """The remote command's own result, under the backend's argv."""
    if raw.returncode == 127 and _remote_not_found(args[0], raw.stderr):
        return CommandResult(args, None, "", raw.stderr, not_found=True, timeout=timeout, transport_error=ServerError(
            ErrorKind.NOT_INSTALLED, f"{args[0]}: not found on PATH on {route.host}"))
    return CommandResult(args, raw.returncode, raw.stdout, raw.stderr, timeout=timeout)


def _remote_not_found(program: str, stderr: str) -> bool:
    """The remote shell's or env's word that `program` is not there (`env: 'tmux': No such file or directory`,
    `sh: 1: tmux: not found`, `bash: line 1: tmux: command not found`)."""
    last = first_line("\n".join(reversed(stderr.splitlines())))
    return program in last and ("not found" in last or "No such file or directory" in last)


def read_text(path: str, *, timeout: float, env: Mapping[str, str]) -> str | None:
    """The text of the file at `path` on the machine the backend runs on (here, or the route's host), None
    when it cannot be read. For a backend's look at system state (/proc) that must be the server's machine."""
    if _route.get() is None:  # no newline translation, and never more than one answer may be
        try:
            with open(path, "rb") as handle:
                data = handle.read(_max_output + 1)
        except OSError:
            return None
        return data.decode("utf-8", "replace") if len(data) <= _max_output else None
    result = run(["cat", "--", path], timeout=timeout, env=env)
    return result.stdout if result.returncode == 0 else None


_NAMESPACE_LINE = re.compile(r"^(net:\[[0-9]+\]) /proc/([0-9]+)/ns$")


def net_namespaces(*, timeout: float, env: Mapping[str, str]) -> dict[str, list[str]] | None:
    """The network namespaces of the processes whose /proc entries can be read on the machine the backend runs
    on (here, or the route's host), each with those processes' pids; None when there is no /proc to tell (macOS,
    BSD, a sandbox that hides it). /proc/PID/net/unix is the socket table of PID's namespace."""
    spaces: dict[str, list[str]] = {}
    if _route.get() is None:
        try:
            pids = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
        except OSError:
            return None
        for pid in pids:
            try:
                spaces.setdefault(os.readlink(f"/proc/{pid}/ns/net"), []).append(pid)
            except OSError:  # another user's process, or one that ended
                pass
        return {ns: p for ns, p in spaces.items() if ns.startswith("net:")} or None
    result = run(["find", "/proc", "-mindepth", "3", "-maxdepth", "3", "-path", "/proc/[0-9]*/ns/net",
                  "-lname", "net:*", "-printf", "%l %h\n"], timeout=timeout, env=env)
    if result.returncode is None:  # other users' processes make find exit 1: what it could read still counts
        return None
    for line in result.stdout.splitlines():
        match = _NAMESPACE_LINE.match(line)
        if match is not None:
            spaces.setdefault(match[1], []).append(match[2])
    return spaces or None  # find itself is always there: nothing listed is no look at all


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
    proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
    assert proc.stdout is not None and proc.stderr is not None
    out, err = (b"".join(chunks[s.fileno()]).decode("utf-8", "replace") for s in (proc.stdout, proc.stderr))
    return out, err


def over_limit(program: str, limit: int) -> str:
    """Why a call's answer is unknown when it printed more than `limit` bytes."""
    return (f"{program} printed more than {limit} bytes, the limit of one answer ($MAM_MAX_OUTPUT): stopped "
            "and not read")


def _run_local(argv: Sequence[str], *, timeout: float, env: Mapping[str, str],
               cwd: str | None = None, limit: int | None = None, stdin: bytes | None = None) -> CommandResult:
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
            return CommandResult(args, None, timeout=timeout, os_error=over_limit(args[0], limit))
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


def max_output_from_env(env: Mapping[str, str]) -> int:
    """$MAM_MAX_OUTPUT: bytes, or with a K, M or G suffix (KiB, MiB, GiB); a usage error when out of bounds."""
    from mam.errors import MamError

    raw = env.get("MAM_MAX_OUTPUT")
    if raw is None or raw == "":
        return DEFAULT_MAX_OUTPUT
    units = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    digits, unit = (raw[:-1], raw[-1].upper()) if raw[-1:].upper() in ("K", "M", "G") else (raw, "")
    value = int(digits) * units[unit] if digits.isascii() and digits.isdigit() and len(digits) <= 12 else -1
    low, high = MAX_OUTPUT_BOUNDS
    if not low <= value <= high:
        raise MamError("usage", f"$MAM_MAX_OUTPUT={raw[:40]}: expected a number of bytes (K, M or G suffix "
                       "allowed), at least 4K and at most 1G")
    return value


def max_output() -> int:
    return _max_output


def set_max_output(limit: int) -> None:
    """The limit of every backend call's output from now on (the command's $MAM_MAX_OUTPUT)."""
    global _max_output
    _max_output = limit


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
        raise MamError("usage", f"${var}={raw}: expected a number of seconds, more than 0 and at most 3600")
    return value
