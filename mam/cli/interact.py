"""The commands that watch or steer one agent: wait, send, peek, attach. None starts a server."""

import sys
from typing import Annotated, Any

import typer

from mam.cli import complete
from mam.cli.context import begin, emit, end_children
from mam.cli.options import HostFilter, Json
from mam.util.errors import MamError

# Deferred imports (inside functions), for start-up: each command loads the core it runs inside it, so `mam --help`
# loads none of it.

Server = Annotated[str | None, typer.Option(
    "--server", metavar="NAME", autocompletion=complete.servers,
    help="the agent's server, when its name is registered on more than one")]


def wait(ctx: typer.Context,
         names: Annotated[list[str], typer.Argument(
             metavar="NAME...", autocompletion=complete.agents, help="the registered agents to watch",
             show_default=False)],
         until: Annotated[str, typer.Option(
             "--until", metavar="STATE[,STATE]",
             help="the states to wait for: working, blocked, idle, done, unknown")],
         timeout: Annotated[float | None, typer.Option(
             "--timeout", metavar="SECONDS", help="give up after this long (exit 1); default: wait on")] = None,
         any_of: Annotated[bool, typer.Option(
             "--any", help="several agents: until one of them is in one of the states")] = False,
         all_of: Annotated[bool, typer.Option(
             "--all", help="several agents: until each of them is (the default)")] = False,
         server: Server = None,
         host: HostFilter = None,
         as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.agents.statusview import parse_state_filter
    from mam.commands.interact import check_timeout, wait_document, wait_many_document
    from mam.util.render import state_text, visible

    if any_of and all_of:
        raise MamError("usage", "give --any or --all, not both", hint="--all (the default) waits for each agent")
    parse_state_filter([until], "--until")
    check_timeout(timeout)
    app = call.open()

    def changed(session: dict[str, Any]) -> None:
        if not call.json and sys.stdout.isatty():
            emit({}, False, state_text(session))

    try:
        if len(names) == 1:  # one agent: --any and --all are the same wait, and its document is wait.json
            doc = wait_document(app, names[0], [until], timeout, server, on_change=changed, host=host)
            sessions = [doc["session"]]
        else:
            doc = wait_many_document(app, names, [until], timeout, server, on_change=changed, host=host,
                                     any_of=any_of)
            sessions = [agent["session"] for agent in doc["agents"]]
    except KeyboardInterrupt:
        end_children()
        raise
    lines = "\n".join(state_text(session) for session in sessions)
    if not doc["reached"]:
        sep = " " if len(sessions) == 1 else "\n"  # one agent: one line, as it always was
        sys.stderr.write(visible(f"mam: timed out after {timeout:g} s:") + sep + lines + "\n")
    # On a terminal each change is already shown; a timeout is said on stderr.
    emit(doc, call.json, None if call.json or sys.stdout.isatty() or not doc["reached"] else lines)
    return 0 if doc["reached"] else 1


def _read_text(path: str | None) -> str:
    """The text of --file PATH, or of stdin (PATH "-"), as a prompt: at most MAX_TEXT characters read."""
    from mam.commands.interact import MAX_TEXT, as_prompt

    try:
        if path is None or path == "-":
            if sys.stdin is None:  # closed: nothing to read
                raise OSError(9, "stdin is closed")
            raw = sys.stdin.read(MAX_TEXT + 2)
        else:
            with open(path, encoding="utf-8") as handle:
                raw = handle.read(MAX_TEXT + 2)
    except (OSError, UnicodeDecodeError) as exc:
        where = "stdin" if path in (None, "-") else f"--file {path}"
        if isinstance(exc, UnicodeDecodeError):
            why = f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
        else:
            why = exc.strerror if exc.strerror else str(exc)
        raise MamError("usage", f"cannot read {where}: {why}") from None
    return as_prompt(raw)


def send(ctx: typer.Context,
         name: Annotated[str, typer.Argument(metavar="NAME", autocompletion=complete.agents,
                                             help="the registered agent to type into")],
         text: Annotated[str | None, typer.Argument(
             metavar="TEXT", help="typed as characters, never as key names; several lines go as one paste; '-' "
             "(or none, when stdin is not a terminal) reads stdin; after -- when it starts with '-'",
             show_default=False)] = None,
         enter: Annotated[bool, typer.Option("--enter", help="press Enter after the text")] = False,
         file: Annotated[str | None, typer.Option(
             "--file", metavar="PATH", help="send the text of this file ('-': stdin)")] = None,
         answer: Annotated[str | None, typer.Option(
             "--answer", metavar="TEXT", help="answer the question of a blocked agent (refused when it is not "
             "blocked); a prompt to a blocked agent is refused")] = None,
         confirm: Annotated[float | None, typer.Option(
             "--confirm", metavar="SECONDS", help="wait this long for the agent to show it took the text (a "
             "prompt: a turn starts; an answer: the question goes); exit 1 when it did not or cannot tell")] = None,
         server: Server = None,
         host: HostFilter = None,
         as_json: Json = False) -> int:
    call = begin(ctx, as_json, takes_trailing=True)
    from mam.commands.interact import check_confirm, check_text, send_document
    from mam.util.render import visible

    if call.trailing and (text is not None or len(call.trailing) != 1):
        raise MamError("usage", "give TEXT once: as one word, or as the one word after --",
                       hint="quote it: mam send NAME -- '-text with spaces'")
    text = call.trailing[0] if call.trailing else text
    if sum(given is not None for given in (text, file, answer)) > 1:
        raise MamError("usage", "give one of TEXT, --file and --answer",
                       hint="--answer TEXT is the text of an answer")
    check_confirm(confirm)
    if answer is not None:
        text = answer
    elif file is not None:
        text = _read_text(file)
    elif text == "-" or (text is None and sys.stdin is not None and not sys.stdin.isatty()):
        text = _read_text(None)
    text = text or ""
    check_text(text, enter)
    doc = send_document(call.open(), name, text, enter, server, host, answer=answer is not None, confirm=confirm)
    said = visible(doc["message"])
    if doc["confirmation"] is not None:
        word = {True: "true", False: "false", None: "unconfirmed"}[doc["delivered"]]
        said += f"\ndelivered: {word} ({visible(doc['confirmation'])}; after {doc['waited']:g} s)"
    emit(doc, call.json, None if call.json else said)
    if doc["confirmation"] is not None and doc["delivered"] is not True:
        what = "the answer may not have been taken" if doc["answer"] else "the text may not have been taken"
        if doc["delivered"] is None:
            what = "it was typed, but cannot be confirmed"
        sys.stderr.write(visible(f"mam: {what}: {doc['confirmation']}") + "\n")
        return 1
    return 0


def peek(ctx: typer.Context,
         name: Annotated[str, typer.Argument(metavar="NAME", autocompletion=complete.agents,
                                             help="the registered agent to look at")],
         lines: Annotated[int, typer.Option(
             "--lines", "-n", metavar="N", help="how many of the last lines of its screen (1 to 10000)")] = 20,
         server: Server = None,
         host: HostFilter = None,
         as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.agents.peeking import check_lines, peek_document

    check_lines(lines)
    doc = peek_document(call.open(), name, lines, server, host)
    emit(doc, call.json, None if call.json else "\n".join(doc["lines"]))
    return 0


def attach(ctx: typer.Context,
           name: Annotated[str, typer.Argument(metavar="NAME", autocompletion=complete.agents,
                                               help="the registered agent to show")],
           server: Server = None,
           host: HostFilter = None) -> int:
    call = begin(ctx, None)
    import os

    from mam.agents.peeking import ATTACH_ECHO, attach_command, exec_attach

    echo = os.environ.get(ATTACH_ECHO) == "1"
    if not echo and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise MamError("usage", "mam attach needs a terminal: it runs the backend's own client",
                       hint=f"run it in a terminal; `mam peek {name}` prints the agent's screen anywhere")
    tty = None
    try:
        tty = os.ttyname(sys.stdin.fileno())
    except OSError:
        pass
    exec_attach(attach_command(call.open(), name, server, host, tty))
    return 0
