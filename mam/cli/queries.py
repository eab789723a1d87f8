"""The commands that ask and report: status, watch, reconcile, ls, audit, backends, env, version. None starts
a server."""

import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import typer

from mam import __version__
from mam.cli import complete
from mam.cli.context import begin, emit, end_children, say_unanswered, waiting
from mam.cli.options import Host, HostFilter, Json
from mam.util.errors import MamError

# Deferred imports (inside functions), for start-up: each command loads the core it runs inside it, so `mam --help`
# loads none of it.

MIN_WATCH = 0.1  # seconds between two reconcile passes: less is a busy loop
DEFAULT_WATCH = 2.0  # seconds between two passes of `status --watch` and `watch` (also in usage.OPTIONAL_VALUES)
# A watch loop's rounds in a row that may fail to read the registry before it ends, exit 2 (docs/cli.md): one
# unreadable read (an editor's save, a half-synced file) is said on stderr and the next round tries again.
UNREADABLE_ROUNDS = 5
T = TypeVar("T")


class Rounds:
    """The rounds in a row of one watch loop that could not read the registry."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.failed = seconds, 0

    def attempt(self, step: Callable[[], T]) -> T | None:
        """`step()`, or None when it could not read the registry: said on stderr, unless it is the
        UNREADABLE_ROUNDS-th such round in a row, which ends the loop. Every other error ends it at once."""
        try:
            result = step()
        except MamError as exc:
            if exc.code != "invalid_registry":
                raise
            self.failed += 1
            if self.failed >= UNREADABLE_ROUNDS:
                raise MamError(exc.code, f"{exc.message} ({self.failed} rounds in a row)", hint=exc.hint) from None
            from mam.util.render import visible

            sys.stderr.write(f"mam: {visible(exc.message)} (round {self.failed} of {UNREADABLE_ROUNDS} in a row "
                             f"that could not read the registry; trying again in {self.seconds:g} s)\n")
            sys.stderr.flush()
            return None
        self.failed = 0
        return result


def status(ctx: typer.Context,
           server: Annotated[list[str] | None, typer.Option(
               "--server", metavar="NAME", autocompletion=complete.servers,
               help="only the rows of this server; one no row names is asked of the selected backend "
                    "(repeatable)")] = None,
           state: Annotated[list[str] | None, typer.Option(
               "--state", metavar="STATE[,STATE]",
               help="only agents in these states: working, blocked, idle, done, unknown (repeatable)")] = None,
           host: HostFilter = None,
           no_state: Annotated[bool, typer.Option(
               "--no-state", help="skip reading the agents' states (no STATE column, no capture calls)")] = False,
           watch: Annotated[float | None, typer.Option(
               "--watch", metavar="[SECONDS]",
               help=f"redraw every SECONDS (default {DEFAULT_WATCH:g}) until interrupted; JSON Lines with --json")
           ] = None,
           as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.agents.statusview import parse_state_filter, status_document
    from mam.util import render

    only = parse_state_filter(state or [])
    if only and no_state:
        raise MamError("usage", "--state and --no-state contradict each other", hint="drop one of them")
    check_watch(watch)
    app = call.open()
    if watch is not None:
        return _status_watch(app, call.json, watch, server or (), not no_state, only, host)
    with waiting("asking the servers for their agents", call.json):
        doc = status_document(app, server or (), with_state=not no_state, only_states=only, host=host)
    code = say_unanswered(app, doc)
    emit(doc, call.json, None if call.json else render.status_text(doc, server or (), host))
    return code


def check_watch(seconds: float | None, option: str = "--watch") -> None:
    if seconds is not None and not (math.isfinite(seconds) and MIN_WATCH <= seconds <= 86400):
        raise MamError("usage", f"{option} {seconds:g}: expected a number of seconds, at least {MIN_WATCH:g} and "
                       "at most 86400")


# Cursor home, then each line followed by erase-to-end-of-line, then erase below: a redraw in place that never
# blanks the whole screen between two frames (no flicker).
HOME, ERASE_LINE, ERASE_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"


def _status_watch(app: Any, as_json: bool, seconds: float, servers: Sequence[str], with_state: bool,
                  only: frozenset[str], host: str | None) -> int:
    """`status --watch`: the table again every `seconds`, redrawn in place on a terminal, one after the other
    (each under a `--- time` line) into a pipe or a file, one compact document per line with --json. Ctrl-C
    ends it, exit 0; SIGTERM or SIGHUP end it as they end any command."""
    from mam.agents.statusview import status_document

    redraw = not as_json and sys.stdout.isatty()
    rounds = Rounds(seconds)
    try:
        while True:
            doc = rounds.attempt(lambda: status_document(app, servers, with_state=with_state, only_states=only,
                                                         host=host))
            if doc is not None:
                _status_frame(app, doc, as_json, redraw, seconds, servers, host)
            time.sleep(seconds)
    except KeyboardInterrupt as exc:
        end_children()
        if type(exc) is not KeyboardInterrupt:  # SIGTERM or SIGHUP: not the user's Ctrl-C that ends a watch
            raise
        return 0


def _status_frame(app: Any, doc: dict[str, Any], as_json: bool, redraw: bool, seconds: float,
                  servers: Sequence[str], host: str | None) -> None:
    """One round of `status --watch`: a compact document, a frame redrawn in place, or one under the last."""
    from mam.agents.statusview import unanswered
    from mam.util import render

    if as_json:
        emit(doc, True, compact=True)
        return
    notes, _ = unanswered(app, doc)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    lines = [f"--- {stamp} (every {seconds:g} s; Ctrl-C ends)", *(render.visible(f"mam: {note}") for note in notes),
             render.status_text(doc, servers, host)]
    text = "\n".join(lines)
    if redraw:
        text = HOME + "".join(line + ERASE_LINE + "\n" for line in text.split("\n")) + ERASE_BELOW
        emit({}, False, text.rstrip("\n"))
    else:
        emit({}, False, text)


def watch(ctx: typer.Context,
          interval: Annotated[float, typer.Option(
              "--interval", metavar="SECONDS", help=f"read the states every SECONDS (default {DEFAULT_WATCH:g})",
              show_default=False)] = DEFAULT_WATCH,
          on: Annotated[str, typer.Option(
              "--on", metavar="STATE[,STATE]", help="the states whose changes are told (default blocked,done)",
              show_default=False)] = "blocked,done",
          notify: Annotated[bool, typer.Option(
              "--notify", help="a desktop notification (notify-send) per change; the terminal bell when notify-send "
                                "is missing or fails")
          ] = False,
          command: Annotated[str | None, typer.Option(
              "--exec", metavar="CMD", help="run CMD (split into words, never by a shell) once per change, the "
                                            "change as one JSON line on its stdin")] = None,
          server: Annotated[list[str] | None, typer.Option(
              "--server", metavar="NAME", autocompletion=complete.servers,
              help="only the agents of this server (repeatable)")] = None,
          host: HostFilter = None,
          as_json: Annotated[bool, typer.Option("--json", help="print each change as one JSON line")] = False) -> int:
    call = begin(ctx, as_json)
    from mam.agents.statusview import parse_state_filter, status_document
    from mam.live.changes import Changes, change_text
    from mam.live.notify import Announcer, exec_argv

    check_watch(interval, "--interval")
    states = parse_state_filter([on], "--on")
    argv = exec_argv(command) if command is not None else None
    app = call.open()
    tracker = Changes(states)
    announcer = Announcer(notify, argv, app.env)
    from mam.plugin.records import AGENT_STATES

    told, told_start = [state for state in AGENT_STATES if state in states], False
    rounds = Rounds(interval)
    try:
        while True:
            doc = rounds.attempt(lambda: status_document(app, server or (), host=host))
            if doc is None:
                time.sleep(interval)
                continue
            for change in tracker.step(doc["sessions"]):
                emit(change, call.json, None if call.json else change_text(change), compact=True)
                announcer.announce(change)  # --exec runs in its own thread, in order: the readings go on
            if not told_start:  # the baseline is read: from now on every change is told
                count = len(doc["sessions"])
                sys.stderr.write(f"mam: watching {count} agent{'s' if count != 1 else ''} for changes into "
                                 f"{', '.join(told)}; Ctrl-C ends\n")
                sys.stderr.flush()
                told_start = True
            time.sleep(interval)
    except KeyboardInterrupt as exc:
        end_children()
        left = announcer.close()
        if left:
            announcer.say(f"--exec: {left} change{'s' if left != 1 else ''} not run (the watch ended)")
        if type(exc) is not KeyboardInterrupt:
            raise
        return 0
    finally:
        announcer.close()  # any other end (an error): the command running now ends with the watch


def reconcile(ctx: typer.Context,
              apply: Annotated[bool, typer.Option(
                  "--apply", help="write the fixes to the registry (the only writing form)")] = False,
              adopt: Annotated[bool, typer.Option(
                  "--adopt", help="register live named agents that have no row")] = False,
              watch: Annotated[float | None, typer.Option(
                  "--watch", metavar="SECONDS", help="repeat every SECONDS until interrupted")] = None,
              restore: Annotated[bool, typer.Option(
                  "--restore", help="with --apply: then restore every terminated agent (as `mam restore --all`)")
              ] = False,
              once: Annotated[bool, typer.Option("--once", help="one pass (the default)")] = False,
              dry_run: Annotated[bool, typer.Option("--dry-run", help="write nothing (the default)")] = False,
              emit_diff: Annotated[bool, typer.Option("--emit-diff", help="print the report (the default)")] = False,
              as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.commands.reconcile import reconcile_document
    from mam.util import render

    if apply and dry_run:
        raise MamError("usage", "--apply and --dry-run contradict each other", hint="drop one of them")
    if watch is not None and not (math.isfinite(watch) and watch >= MIN_WATCH):
        raise MamError("usage", f"--watch {watch:g}: expected a number of seconds, at least {MIN_WATCH:g}")
    if restore and not apply:
        raise MamError("usage", "--restore needs --apply", hint="mam reconcile --apply --restore")
    if watch is not None and once:
        raise MamError("usage", "--once and --watch contradict each other", hint="drop one of them")
    app = call.open()
    if watch is None:
        with waiting("asking the servers for their agents", call.json):
            doc = reconcile_document(app, apply=apply, adopt=adopt, restore=restore)
        code = say_unanswered(app, doc)
        emit(doc, call.json, None if call.json else render.reconcile_text(doc))
        counts = doc["restore"]["counts"] if doc["restore"] else {}
        return 1 if counts.get("failed") or counts.get("untrusted") else code
    rounds = Rounds(watch)
    try:
        while True:
            found = rounds.attempt(lambda: reconcile_document(app, apply=apply, adopt=adopt, restore=restore))
            if found is not None:
                text = f"--- {time.strftime('%Y-%m-%d %H:%M:%S')}\n{render.reconcile_text(found)}"
                emit(found, call.json, None if call.json else text, compact=True)
            time.sleep(watch)
    except KeyboardInterrupt as exc:
        end_children()
        if type(exc) is not KeyboardInterrupt:  # SIGTERM or SIGHUP: not the user's Ctrl-C that ends a watch
            raise
        return 0


def ls(ctx: typer.Context,
       server: Annotated[str, typer.Option("--server", metavar="NAME", autocompletion=complete.servers,
                                           help="the server to list")],
       host: Host = None,
       as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.commands.inspect import ls_document
    from mam.plugin.records import ServerState
    from mam.util import render

    doc, outcome = ls_document(call.open(), server, host)
    emit(doc, call.json, None if call.json else render.ls_text(doc))
    return 1 if outcome.state is ServerState.UNKNOWN else 0


def audit(ctx: typer.Context,
          since: Annotated[str | None, typer.Option(
              "--since", metavar="T", help="only lines since T: an age (90s, 15m, 2h, 3d) or an ISO 8601 date or "
                                           "time (UTC unless it says)")] = None,
          agent: Annotated[str | None, typer.Option(
              "--agent", metavar="NAME", autocompletion=complete.agents, help="only the lines about this agent")
          ] = None,
          limit: Annotated[int, typer.Option(
              "--limit", metavar="N", help="the last N lines that match (default 100; 0: all)")] = 100,
          as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.audit.reading import audit_document, audit_text, parse_since
    from mam.config.workspace import open_workspace

    if limit < 0:
        raise MamError("usage", f"--limit {limit}: expected 0 (all) or more")
    since_time = None if since is None else parse_since(since, time.time())
    doc = audit_document(open_workspace(call.workspace).dot_mam, since_time, agent, limit)
    if doc["skipped"]:
        sys.stderr.write(f"mam: warning: {doc['skipped']} line(s) of the audit trail are not its own (torn or "
                         "foreign): skipped\n")
    emit(doc, call.json, None if call.json else audit_text(doc))
    return 0


def backends(ctx: typer.Context, as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.commands.inspect import backends_document
    from mam.util import render

    doc = backends_document(call.open())
    emit(doc, call.json, None if call.json else render.backends_text(doc))
    return 0


def env(ctx: typer.Context, as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.commands.inspect import env_document
    from mam.util import render

    doc = env_document(call.open())
    emit(doc, call.json, None if call.json else render.env_text(doc))
    return 0


def kinds(ctx: typer.Context, as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.commands.kinds import kinds_document
    from mam.util import render

    doc = kinds_document(call.open())
    emit(doc, call.json, None if call.json else render.kinds_text(doc))
    return 0


def version(ctx: typer.Context, as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    emit({"schema": 1, "version": __version__}, call.json, f"mam {__version__}")
    return 0
