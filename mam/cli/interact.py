"""The commands that watch or steer one agent: wait, send. Neither starts a server."""

import sys
from typing import Annotated, Any

import typer

from mam.cli import complete
from mam.cli.context import begin, emit, end_children
from mam.cli.options import HostFilter

Json = Annotated[bool, typer.Option("--json", help="print one JSON document on stdout")]
Server = Annotated[str | None, typer.Option(
    "--server", metavar="NAME", autocompletion=complete.servers,
    help="the agent's server, when its name is registered on more than one")]


def wait(ctx: typer.Context,
         name: Annotated[str, typer.Argument(metavar="NAME", help="the registered agent to watch")],
         until: Annotated[str, typer.Option(
             "--until", metavar="STATE[,STATE]",
             help="the states to wait for: working, blocked, idle, done, unknown")],
         timeout: Annotated[float | None, typer.Option(
             "--timeout", metavar="SECONDS", help="give up after this long (exit 1); default: wait on")] = None,
         server: Server = None,
         host: HostFilter = None,
         as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.commands.interact import check_timeout, wait_document
    from mam.render import state_text, visible
    from mam.statusview import parse_state_filter

    parse_state_filter([until], "--until")
    check_timeout(timeout)
    app = call.open()

    def changed(session: dict[str, Any]) -> None:
        if not call.json and sys.stdout.isatty():
            emit({}, False, state_text(session))

    try:
        doc = wait_document(app, name, [until], timeout, server, on_change=changed, host=host)
    except KeyboardInterrupt:
        end_children()
        raise
    line = state_text(doc["session"])
    if not doc["reached"]:
        sys.stderr.write(visible(f"mam: timed out after {timeout:g} s: ") + line + "\n")
    # On a terminal the last change is already shown; a timeout is said on stderr.
    emit(doc, call.json, None if call.json or sys.stdout.isatty() or not doc["reached"] else line)
    return 0 if doc["reached"] else 1


def send(ctx: typer.Context,
         name: Annotated[str, typer.Argument(metavar="NAME", help="the registered agent to type into")],
         text: Annotated[str | None, typer.Argument(
             metavar="TEXT", help="typed as characters, never as key names; after -- when it starts with '-'",
             show_default=False)] = None,
         enter: Annotated[bool, typer.Option("--enter", help="press Enter after the text")] = False,
         server: Server = None,
         host: HostFilter = None,
         as_json: Json = False) -> int:
    call = begin(ctx, as_json, takes_trailing=True)
    from mam.commands.interact import check_text, send_document
    from mam.errors import MamError
    from mam.render import visible

    if call.trailing and (text is not None or len(call.trailing) != 1):
        raise MamError("usage", "give TEXT once: as one word, or as the one word after --",
                       hint="quote it: mam send NAME -- '-text with spaces'")
    text = call.trailing[0] if call.trailing else text or ""
    check_text(text, enter)
    doc = send_document(call.open(), name, text, enter, server, host)
    emit(doc, call.json, None if call.json else visible(doc["message"]))
    return 0
