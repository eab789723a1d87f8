"""Telling the user of a change (mam.changes): a desktop notification through `notify-send` where it exists, the
terminal bell otherwise, and the user's own command with the change as JSON on its stdin. For `mam watch
--notify --exec` and the same switches of the `mam top` view.

Every program runs from an explicit argv (never a shell), with a time limit, in a process group of its own that
is killed with it when the limit passes; nothing it prints is read (its output goes to mam's stderr, so that
`--json` output stays clean).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

NOTIFY_SEND = "notify-send"
NOTIFY_TIMEOUT = 5.0  # seconds notify-send may take (a desktop bus that does not answer)
EXEC_TIMEOUT = 30.0  # seconds the user's command may take per change
BELL = "\a"


def exec_argv(command: str) -> list[str]:
    """--exec CMD as an argv: split as a shell splits words (quotes kept together), never run by one. Empty or
    unbalanced quoting is bad input."""
    import shlex

    from mam.errors import MamError

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

    from mam.render import visible

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
                output: int | None = None) -> str | None:
    """Run `argv` with `stdin` as its input, its output on `output` (a file descriptor, or subprocess.DEVNULL;
    mam's stderr by default); None when it ran and exited 0, else what went wrong in one line (not found, exit
    status, killed at the time limit)."""
    out = sys.stderr.fileno() if output is None else output
    try:
        proc = subprocess.Popen(  # noqa: S603 - the user's own argv, no shell
            list(argv), stdin=subprocess.PIPE, stdout=out, stderr=out, env=dict(env), start_new_session=True)
    except OSError as exc:
        return f"{argv[0]}: {exc.strerror or exc}"
    try:
        proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return f"{argv[0]}: no end within {timeout:g} s; killed"
    except BaseException:  # Ctrl-C: the command ends with mam
        _kill_group(proc)
        raise
    return None if proc.returncode == 0 else f"{argv[0]}: exit status {proc.returncode}"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


class Announcer:
    """What to do with each change: `notify` (notify-send, else the bell on `bell_to`), `exec_argv` (the user's
    command, the change as one JSON line on stdin). Failures are said once per change (on stderr, or to `tell`);
    they never end the watch. A full-screen view passes `bell` (its own bell), `tell` (its status line) and
    `output` (subprocess.DEVNULL: nothing the programs print may reach its screen)."""

    def __init__(self, notify: bool, command: Sequence[str] | None, env: Mapping[str, str],
                 bell_to: TextIO | None = None, exec_timeout: float = EXEC_TIMEOUT,
                 bell: Callable[[], None] | None = None, tell: Callable[[str], None] | None = None,
                 output: int | None = None) -> None:
        self.notify = notify
        self.command = list(command) if command else None
        self.env = dict(env)
        self.bell_to = bell_to if bell_to is not None else sys.stderr
        self.bell, self.tell, self.output = bell, tell, output
        self.exec_timeout = exec_timeout
        self.notifier = shutil.which(NOTIFY_SEND, path=self.env.get("PATH", "")) if notify else None

    def announce(self, change: Mapping[str, Any]) -> list[str]:
        """Tell of one change; the problems met, each a line (also written to stderr)."""
        problems: list[str] = []
        if self.notify:
            if self.notifier is not None:
                argv = notification_argv(change)
                problem = run_bounded([self.notifier, *argv[1:]], b"", NOTIFY_TIMEOUT, self.env, self.output)
                if problem is not None:  # no desktop to show it (no session bus): the bell still tells
                    problems.append(problem.replace(self.notifier, NOTIFY_SEND, 1))
            if self.notifier is None or problems:
                self.ring()
        if self.command is not None:
            data = (json.dumps(change, separators=(",", ":")) + "\n").encode()
            problem = run_bounded(self.command, data, self.exec_timeout, self.env, self.output)
            if problem is not None:
                problems.append(f"--exec {problem}")
        for problem in problems:
            from mam.render import visible

            if self.tell is not None:
                self.tell(visible(problem))
            else:
                sys.stderr.write(f"mam: {visible(problem)}\n")
                sys.stderr.flush()
        return problems

    def ring(self) -> None:
        if self.bell is not None:
            self.bell()
        else:
            self.bell_to.write(BELL)
            self.bell_to.flush()
