"""The entry point: runs one command line and turns every way it can end into mam's exit codes and messages."""

from __future__ import annotations

import json
import os
import sys
from typing import NoReturn, TextIO

import click

from mam.cli import complete, usage
from mam.cli.context import State, end_children
from mam.util.errors import MamError

# Deferred imports (inside functions), for start-up: the command tree (every command's module) loads only when a
# command line is parsed.


def run(argv: list[str]) -> int:
    from mam.cli.app import command

    root = command()
    words, trailing = usage.split(argv)
    words, path = usage.prepare(words, root)
    try:
        # Not root.main(): it would print click's own errors and turn Ctrl-C into click.Abort.
        with root.make_context("mam", words, obj=State(trailing)) as ctx:
            return int(root.invoke(ctx) or 0)
    except click.exceptions.Exit as exc:  # --help, --version
        return exc.exit_code
    except click.UsageError as exc:
        raise usage.from_click(exc, path) from None
    except click.ClickException as exc:
        raise MamError("operation_failed", " ".join(exc.format_message().split())) from None


def _wants_json(argv: list[str]) -> bool:
    return "--json" in usage.split(argv)[0]


def _fail(error: MamError, as_json: bool) -> NoReturn:
    from mam.util.render import visible  # a message may quote a path or a name: never raw escapes, always one line

    _say(sys.stderr, f"mam: {visible(error.message)}\n" + (f"hint: {visible(error.hint)}\n" if error.hint else ""))
    trail = sys.modules.get("mam.audit.trail")  # loaded only by a command that acts
    if trail is not None:
        _say(sys.stderr, "".join(trail.held()))
    if as_json:
        _say(sys.stdout, json.dumps(error.as_json()) + "\n")
    _say(sys.stdout, "")
    sys.exit(error.exit_code)


def _say(stream: TextIO, text: str) -> None:
    """Write and flush `text`; a stream that cannot take it (closed, full, gone) is pointed at /dev/null, so
    that nothing it still buffers fails again at exit: the exit code is what is left to tell."""
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):
        _mute(stream)


def _mute(stream: TextIO) -> None:
    try:
        null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        os.dup2(null, stream.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass


def _std_streams() -> bool:
    """Give each closed standard stream (`>&-`) /dev/null, so that no file mam opens later takes its number and
    no write to it raises; False when standard output was closed: the command's output could go nowhere."""
    ok = True
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, mode)  # the lowest free number: `fd` itself, as the lower ones are open
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            ok = ok and fd != 1
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)  # the process's own stream, for its whole life
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")
    return ok


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled as Ctrl-C is: the backend processes in flight end with mam."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, frame: object) -> None:
    import signal

    runner = sys.modules.get("mam.calls.runner")
    if runner is not None and runner.defer_signal(signum):
        return  # the main thread is starting a backend process: raised once it is known (mam.calls.runner)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def main(argv: list[str] | None = None) -> NoReturn:
    import signal

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup, or `&` in a script: left ignored
            signal.signal(signum, _on_signal)
    stdout_open = _std_streams()
    args = list(sys.argv[1:] if argv is None else argv)
    if os.environ.get(complete.VARIABLE):
        from mam.cli.app import command

        complete.respond(command)
    as_json = _wants_json(args)
    if not stdout_open:
        _fail(MamError("operation_failed", "standard output is closed: nothing was run",
                       hint="send the output somewhere, /dev/null included"), False)
    try:
        code = run(args)
    except MamError as exc:
        _fail(exc, as_json)
    except KeyboardInterrupt as exc:
        end_children()
        sys.stderr.write("mam: interrupted\n")
        sys.exit(128 + exc.signum if isinstance(exc, Terminated) else 130)
    except BrokenPipeError:
        os._exit(0)
    except Exception as exc:
        if os.environ.get("MAM_DEBUG") == "1":
            raise
        _fail(MamError("operation_failed", f"internal error: {type(exc).__name__}: {exc}",
                       hint="rerun with MAM_DEBUG=1 for a traceback, and report it"), as_json)
    sys.exit(code)
