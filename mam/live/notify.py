"""Telling the user of a change (mam.live.changes): a desktop notification through `notify-send` where it exists, the
terminal bell otherwise, and the user's own command with the change as JSON on its stdin. For `mam watch
--notify --exec` and the same switches of the `mam top` view.

Every program runs from an explicit argv (never a shell), with a time limit, in a process group of its own that
is killed with it when the limit passes; nothing it prints is read (its output goes to mam's stderr, so that
`--json` output stays clean). The user's command runs one change at a time, in order, in a thread of its own
(ExecQueue), so the readings go on while it runs; a command slower than the changes come drops the oldest
waiting ones, and says so, rather than fall behind without bound.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from mam.util.errors import MamError

# Deferred imports (inside functions), for start-up: the rendering helper loads only when a notice is shown.

NOTIFY_SEND = "notify-send"
NOTIFY_TIMEOUT = 5.0  # seconds notify-send may take (a desktop bus that does not answer)
EXEC_TIMEOUT = 30.0  # seconds the user's command may take per change
EXEC_QUEUE = 8  # changes that may wait for the user's command while it runs; one more drops the oldest (docs/cli.md)
BELL = "\a"


def exec_argv(command: str) -> list[str]:
    """--exec CMD as an argv: split as a shell splits words (quotes kept together), never run by one. Empty or
    unbalanced quoting is bad input."""
    import shlex


    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise MamError("usage", f"--exec {command!r}: {exc}",
                       hint="quote it as a shell would: --exec 'cmd arg'") from None
    if not argv:
        raise MamError("usage", "--exec: an empty command", hint="--exec 'notify-me --urgent'")
    return argv


def notification_argv(change: Mapping[str, Any]) -> list[str]:
    """notify-send's argv for one change: title and body are data (after `--`), escaped for one line each."""
    import html

    from mam.util.render import visible

    on = f" on {change['host']}" if change.get("host") else ""
    title = visible(f"mam: {change['name']} is {change['to']}")
    evidence = change.get("evidence") or {}
    detail = evidence.get("line") or evidence.get("rule") or evidence.get("fact") or ""
    # The body is markup to notify-send (a name `<b>` or `a&b` would be read as a tag or an entity): escaped.
    body = html.escape(visible(f"{change['backend']} server {change['server']}{on}" +
                               (f": {detail}" if detail else "")), quote=False)
    urgency = "critical" if change["to"] == "blocked" else "normal"
    return [NOTIFY_SEND, "--app-name=mam", f"--urgency={urgency}", "--", title, body]


def run_bounded(argv: Sequence[str], stdin: bytes, timeout: float, env: Mapping[str, str],
                output: int | None = None,
                started: Callable[[subprocess.Popen[bytes]], None] | None = None) -> str | None:
    """Run `argv` with `stdin` as its input, its output on `output` (a file descriptor, or subprocess.DEVNULL;
    mam's stderr by default); None when it ran and exited 0, else what went wrong in one line (not found, exit
    status, killed at the time limit). `started` is given the process once it runs (to be killed from
    another thread)."""
    out = sys.stderr.fileno() if output is None else output
    try:
        proc = subprocess.Popen(  # noqa: S603 - the user's own argv, no shell
            list(argv), stdin=subprocess.PIPE, stdout=out, stderr=out, env=dict(env), start_new_session=True)
    except OSError as exc:
        return f"{argv[0]}: {exc.strerror or exc}"
    if started is not None:
        started(proc)
    try:
        proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return f"{argv[0]}: no end within {timeout:g} s; killed"
    except BaseException:  # Ctrl-C: the command ends with mam
        _kill_group(proc)
        raise
    return None if proc.returncode == 0 else f"{argv[0]}: exit status {proc.returncode}"


def _kill_group(proc: subprocess.Popen[bytes], wait: bool = True) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    if wait:
        proc.wait()


Change = Mapping[str, Any]


class ExecQueue:
    """Runs `run(change)` for each change put, one at a time and in the order put, in a thread of its own (started
    at the first change). At most `size` changes wait while one runs: one more drops the oldest waiting, which is
    counted (`dropped`) and given to `on_drop` with the count so far, outside the lock."""

    def __init__(self, run: Callable[[Change], None], size: int = EXEC_QUEUE,
                 on_drop: Callable[[Change, int], None] | None = None) -> None:
        self.run, self.size, self.on_drop = run, size, on_drop
        self._waiting: deque[Change] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.busy = False
        self.dropped = 0

    def put(self, change: Change) -> None:
        dropped: Change | None = None
        with self._cond:
            if self._closed:
                return
            if len(self._waiting) >= self.size:
                dropped = self._waiting.popleft()
                self.dropped += 1
            self._waiting.append(change)
            count = self.dropped
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True, name="mam --exec")
                self._thread.start()
            self._cond.notify_all()
        if dropped is not None and self.on_drop is not None:
            self.on_drop(dropped, count)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                change = self._waiting.popleft()
                self.busy = True
            try:
                self.run(change)
            except Exception:  # a failure is the run's own to say; the next change still runs
                pass
            finally:
                with self._cond:
                    self.busy = False
                    self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def idle(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds until nothing runs or waits; whether that happened."""
        with self._cond:
            return self._cond.wait_for(lambda: not self.busy and not self._waiting, timeout)

    def close(self) -> int:
        """Run nothing more: the changes still waiting are dropped; how many."""
        with self._cond:
            self._closed = True
            left = len(self._waiting)
            self._waiting.clear()
            self._cond.notify_all()
        return left


class Announcer:
    """What to do with each change: `notify` (notify-send, else the bell on `bell_to`), `exec_argv` (the user's
    command, the change as one JSON line on stdin). Failures are said once per change (on stderr, or to `tell`);
    they never end the watch. A full-screen view passes `bell` (its own bell), `tell` (its status line) and
    `output` (subprocess.DEVNULL: nothing the programs print may reach its screen)."""

    def __init__(self, notify: bool, command: Sequence[str] | None, env: Mapping[str, str],
                 bell_to: TextIO | None = None, exec_timeout: float = EXEC_TIMEOUT,
                 bell: Callable[[], None] | None = None, tell: Callable[[str], None] | None = None,
                 output: int | None = None, queue: int = EXEC_QUEUE) -> None:
        self.notify = notify
        self.command = list(command) if command else None
        self.env = dict(env)
        self.bell_to = bell_to if bell_to is not None else sys.stderr
        self.bell, self.tell, self.output = bell, tell, output
        self.exec_timeout = exec_timeout
        self.notifier = shutil.which(NOTIFY_SEND, path=self.env.get("PATH", "")) if notify else None
        self.runs = ExecQueue(self._exec, queue, self._dropped)
        self._running: subprocess.Popen[bytes] | None = None

    def announce(self, change: Mapping[str, Any]) -> list[str]:
        """Tell of one change: notify-send or the bell now, the user's command in its turn (ExecQueue); the
        problems met now, each a line (also said)."""
        problems = self.notify_now(change)
        self.exec_later(change)
        return problems

    def exec_later(self, change: Change) -> None:
        """The user's command for `change`, after those of the changes before it (none without --exec)."""
        if self.command is not None:
            self.runs.put(change)

    def notify_now(self, change: Change) -> list[str]:
        """notify-send or the bell (nothing without --notify); the problems met, each a line (also said)."""
        problems: list[str] = []
        if self.notify:
            if self.notifier is not None:
                argv = notification_argv(change)
                problem = run_bounded([self.notifier, *argv[1:]], b"", NOTIFY_TIMEOUT, self.env, self.output)
                if problem is not None:  # no desktop to show it (no session bus): the bell still tells
                    problems.append(problem.replace(self.notifier, NOTIFY_SEND, 1))
            if self.notifier is None or problems:
                self.ring()
        for problem in problems:
            self.say(problem)
        return problems

    def _exec(self, change: Change) -> None:
        assert self.command is not None
        data = (json.dumps(change, separators=(",", ":")) + "\n").encode()
        problem = run_bounded(self.command, data, self.exec_timeout, self.env, self.output, self._started)
        self._running = None
        if problem is not None and not self.runs.closed:  # killed by `close`: nothing to say
            self.say(f"--exec {problem}")

    def _started(self, proc: subprocess.Popen[bytes]) -> None:
        self._running = proc
        if self.runs.closed:  # `close` came while it was being started, and saw no run to kill
            _kill_group(proc, wait=False)

    def _dropped(self, change: Change, count: int) -> None:
        self.say(f"--exec is behind: the change of {change.get('name')} to {change.get('to')} at {change.get('at')} "
                 f"was dropped ({count} dropped so far; at most {self.runs.size} changes wait while it runs)")

    def say(self, text: str) -> None:
        from mam.util.render import visible

        if self.tell is not None:
            self.tell(visible(text))
        else:
            sys.stderr.write(f"mam: {visible(text)}\n")
            sys.stderr.flush()

    def close(self) -> int:
        """The watch ends: the command running now is killed with its process group, the changes still waiting
        are not run; how many."""
        left = self.runs.close()
        running = self._running
        if running is not None:
            _kill_group(running, wait=False)
        return left

    def ring(self) -> None:
        if self.bell is not None:
            self.bell()
        else:
            self.bell_to.write(BELL)
            self.bell_to.flush()
