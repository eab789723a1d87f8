"""`mam top`: the command alone. What its keys do is mam/live/actions.py, the view mam/cli/topview.py (the
only module that imports Textual); both are imported only when the view starts, so no other command's
start-up pays for them."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from mam.cli import complete
from mam.cli.context import begin, end_children
from mam.cli.options import HostFilter
from mam.util.errors import MamError

# Deferred imports (inside functions), for start-up: `mam top` loads Textual and its view only when it runs.

INSTALL_HINT = "pip install 'mam[top]' (or: pip install textual)"


def top(ctx: typer.Context,
        server: Annotated[list[str] | None, typer.Option(
            "--server", metavar="NAME", autocompletion=complete.servers,
            help="only the rows of this server (repeatable)")] = None,
        host: HostFilter = None,
        interval: Annotated[float, typer.Option(
            "--interval", metavar="SECONDS",
            help="seconds between refreshes while things change (0.2 to 60); up to 8 times longer while nothing "
                 "does (longer still over a fleet that large refreshes would cost over 2.5% of a core)")] = 1.0,
        notify: Annotated[bool, typer.Option(
            "--notify", help="a desktop notification (notify-send) per change of an agent into blocked or done; "
                             "the terminal bell without it (as mam watch --notify)")] = False,
        command: Annotated[str | None, typer.Option(
            "--exec", metavar="CMD", help="run CMD (split into words, never by a shell) once per change into "
                                          "blocked or done, the change as one JSON line on its stdin (as mam "
                                          "watch --exec)")] = None) -> int:
    call = begin(ctx, None)
    from mam.live.notify import exec_argv

    argv = exec_argv(command) if command is not None else None
    if not (0.2 <= interval <= 60):
        raise MamError("usage", f"--interval {interval:g}: expected seconds, at least 0.2 and at most 60")
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise MamError("usage", "mam top is a full-screen view and needs a terminal",
                       hint="for output to a pipe or a file use `mam status --watch` (or `mam status --json`)")
    try:
        from mam.cli.topview import TopApp
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] not in ("textual", "rich"):
            raise
        raise MamError("operation_failed", f"mam top needs Textual, which is not installed: {INSTALL_HINT}") from None
    from mam.live.actions import Actions

    actions = Actions(call.open(), server or (), host)
    try:
        TopApp(actions, interval=interval, notify=notify, command=argv).run()
    finally:
        end_children()  # a call still waiting on a hung server ends with the view
    return 0
