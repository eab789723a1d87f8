"""The commands that ask and report: status, reconcile, ls, backends, env, version. None starts a server."""

import math
import time
from typing import Annotated, Any

import typer

from mam import __version__
from mam.cli import complete
from mam.cli.context import begin, emit, end_children, say_unanswered, waiting
from mam.cli.options import Host, HostFilter
from mam.errors import MamError

MIN_WATCH = 0.1  # seconds between two reconcile passes: less is a busy loop

Json = Annotated[bool, typer.Option("--json", help="print one JSON document on stdout")]


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
           as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam import render
    from mam.statusview import parse_state_filter, status_document

    only = parse_state_filter(state or [])
    if only and no_state:
        raise MamError("usage", "--state and --no-state contradict each other", hint="drop one of them")
    app = call.open()
    with waiting("asking the servers for their agents", call.json):
        doc = status_document(app, server or (), with_state=not no_state, only_states=only, host=host)
    code = say_unanswered(app, doc)
    emit(doc, call.json, None if call.json else render.status_text(doc, server or (), host))
    return code


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
    from mam import render
    from mam.commands.reconcile import reconcile_document

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
        emit(doc, call.json, None if call.json else _with_restore(render.reconcile_text(doc), doc))
        counts = doc["restore"]["counts"] if doc["restore"] else {}
        return 1 if counts.get("failed") or counts.get("untrusted") else code
    try:
        while True:
            doc = reconcile_document(app, apply=apply, adopt=adopt, restore=restore)
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            text = f"--- {stamp}\n{_with_restore(render.reconcile_text(doc), doc)}"
            emit(doc, call.json, None if call.json else text, compact=True)
            time.sleep(watch)
    except KeyboardInterrupt as exc:
        end_children()
        if type(exc) is not KeyboardInterrupt:  # SIGTERM or SIGHUP: not the user's Ctrl-C that ends a watch
            raise
        return 0


def _with_restore(text: str, doc: dict[str, Any]) -> str:
    """The reconcile report, then what --restore did, one line per agent."""
    from mam.render import visible

    if doc["restore"] is None:
        return text
    lines = [visible(f"restore {a['name']} ({a['backend']} server {a['server']}): {a['outcome'].replace('_', ' ')}: "
                     f"{a['message']}" + _untrusted(a)) for a in doc["restore"]["agents"]]
    return "\n".join([text, *(lines or ["restore: nothing to restore"])])


def _untrusted(agent: dict[str, Any]) -> str:
    """What a spec left unrun for want of consent would run, on its one line: its argv and the variables it
    would get."""
    if agent["outcome"] != "untrusted" or not agent["argv"]:
        return ""
    import shlex

    env = f"; env: {', '.join(agent['env_names'])}" if agent["env_names"] else ""
    return f" (argv: {shlex.join(agent['argv'])}{env})"


def ls(ctx: typer.Context,
       server: Annotated[str, typer.Option("--server", metavar="NAME", autocompletion=complete.servers,
                                           help="the server to list")],
       host: Host = None,
       as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam import render
    from mam.commands.inspect import ls_document
    from mam.plugin.records import ServerState

    doc, outcome = ls_document(call.open(), server, host)
    emit(doc, call.json, None if call.json else render.ls_text(doc))
    return 1 if outcome.state is ServerState.UNKNOWN else 0


def backends(ctx: typer.Context, as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam import render
    from mam.commands.inspect import backends_document

    doc = backends_document(call.open())
    emit(doc, call.json, None if call.json else render.backends_text(doc))
    return 0


def env(ctx: typer.Context, as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam import render
    from mam.commands.inspect import env_document

    doc = env_document(call.open())
    emit(doc, call.json, None if call.json else render.env_text(doc))
    return 0


def kinds(ctx: typer.Context, as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam import render
    from mam.commands.kinds import kinds_document

    doc = kinds_document(call.open())
    emit(doc, call.json, None if call.json else render.kinds_text(doc))
    return 0


def version(ctx: typer.Context, as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    emit({"schema": 1, "version": __version__}, call.json, f"mam {__version__}")
    return 0
