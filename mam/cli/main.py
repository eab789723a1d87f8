"""The entry point: runs one command line and turns every way it can end into mam's exit codes and messages."""

from __future__ import annotations

import json
import os
import sys
from typing import NoReturn

import click

from mam.cli import complete, usage
from mam.cli.context import State, end_children
from mam.errors import MamError


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
    from mam.render import visible  # a message may quote a path or a name: never raw escapes, always one line

    sys.stderr.write(f"mam: {visible(error.message)}\n")
    if error.hint:
        sys.stderr.write(f"hint: {visible(error.hint)}\n")
    if as_json:
        sys.stdout.write(json.dumps(error.as_json()) + "\n")
    sys.stdout.flush()
    sys.exit(error.exit_code)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled as Ctrl-C is: the backend processes in flight end with mam."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, frame: object) -> None:
    import signal

    runner = sys.modules.get("mam.runner")
    if runner is not None and runner.defer_signal(signum):
        return  # the main thread is starting a backend process: raised once it is known (mam.runner)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def main(argv: list[str] | None = None) -> NoReturn:
    import signal

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup, or `&` in a script: left ignored
            signal.signal(signum, _on_signal)
    args = list(sys.argv[1:] if argv is None else argv)
    if os.environ.get(complete.VARIABLE):
        from mam.cli.app import command

        complete.respond(command)
    as_json = _wants_json(args)
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
