"""The commands that act on servers and agents: bootstrap, spawn, stop, forget, prune, exec."""

import os
import sys
from typing import Annotated, Any

import typer

from mam.cli import complete
from mam.cli.context import begin, emit
from mam.cli.options import Host, HostFilter, Json
from mam.util.errors import MamError

# Deferred imports (inside functions), for start-up: each command loads the core it runs inside it, so `mam --help`
# loads none of it.

DryRun = Annotated[bool, typer.Option("--dry-run", help="say what would be removed, write nothing")]


def bootstrap(ctx: typer.Context,
              server: Annotated[str, typer.Option("--server", metavar="NAME", autocompletion=complete.servers,
                                                  help="the server to start")],
              host: Host = None,
              as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.commands.inspect import bootstrap_document

    doc = bootstrap_document(call.open(), server, host)
    on = f" on {doc['host']}" if doc["host"] else ""
    emit(doc, call.json, None if call.json else f"{doc['backend']} server {doc['server']}{on} is up ({doc['message']})")
    return 0


def spawn(ctx: typer.Context,
          name: Annotated[str, typer.Argument(metavar="NAME", help="the agent's name, unique on its server")],
          args: Annotated[list[str] | None, typer.Argument(
              metavar="[-- ARGS...]", help="arguments for the agent, after --", show_default=False)] = None,
          agent: Annotated[str | None, typer.Option(
              "--agent", metavar="KIND", help="agent kind: claude, codex, gemini, opencode, ...")] = None,
          server: Annotated[str | None, typer.Option(
              "--server", metavar="NAME", autocompletion=complete.servers,
              help="server to start it on (default $MAM_SERVER, else mam)")] = None,
          cwd: Annotated[str | None, typer.Option("--cwd", metavar="DIR", help="working directory")] = None,
          command: Annotated[str | None, typer.Option(
              "--command", metavar="CMD", help="run this command instead of the agent's own program (with --agent, "
                                                "its screen is read as that kind's)")] = None,
          env: Annotated[list[str] | None, typer.Option(
              "--env", metavar="NAME", help="pass your value of NAME to the agent; the registry keeps the name "
                                            "only (repeatable)")] = None,
          host: Host = None,
          trust_spec: Annotated[bool, typer.Option(
              "--trust-spec", help="run it even when the workspace's .mam/states.yaml puts words into its argv "
                                   "(mam shows them and refuses without this, or a yes at a terminal)")] = False,
          worktree: Annotated[bool, typer.Option(
              "--worktree", help="start it in a git worktree of its own, .mam/worktrees/NAME of the repository "
                                 "(--cwd's, else the workspace's), on --branch")] = False,
          branch: Annotated[str | None, typer.Option(
              "--branch", metavar="BRANCH", help="with --worktree: its branch, new from HEAD or an existing one "
                                                 "(default mam/NAME)")] = None,
          as_json: Json = False) -> int:
    call = begin(ctx, as_json, takes_trailing=True)
    from mam.commands.lifecycle import spawn_document

    if branch is not None and not worktree:
        raise MamError("usage", "--branch is for --worktree", hint=f"mam spawn {name} --worktree --branch {branch}")

    ask = _ask if not call.json and sys.stdin is not None and sys.stdin.isatty() else None  # never in a script
    doc = spawn_document(call.open(), name, agent=agent, server=server, cwd=cwd, command=command,
                         args=[*(args or ()), *call.trailing], env_names=env or [], progress=not call.json,
                         host=host, trust_spec=trust_spec, ask=ask,
                         worktree=(branch or "") if worktree else None)
    s = doc["session"]
    from mam.util.render import visible

    on = f" on {s['host']}" if s.get("host") else ""
    branch = f", branch {doc['worktree']['branch']}" if doc.get("worktree") else ""
    emit(doc, call.json, None if call.json else visible(f"{s['name']} is {s['status']} on {s['backend']} server "
                                                        f"{s['server']}{on} (pane {s['pane_id']}, cwd {s['cwd']}"
                                                        f"{branch})"))
    return 0


def stop(ctx: typer.Context,
         name: Annotated[str | None, typer.Argument(metavar="[NAME]", autocompletion=complete.agents,
                                                    help="the agent to stop", show_default=False)] = None,
         server: Annotated[str | None, typer.Option("--server", metavar="NAME", autocompletion=complete.servers,
                                                    help="its server; with --all: only the agents of this server")
                           ] = None,
         force: Annotated[bool, typer.Option(
             "--force", help="close NAME even when mam did not start its pane or session, and ask the backend even "
                             "when NAME is not registered here (on --server, else the default server); not with "
                             "--all")] = False,
         all_rows: Annotated[bool, typer.Option(
             "--all", help="every running or starting agent (of --server, --host, --backend when given)")] = False,
         yes: Annotated[bool, typer.Option("--yes", "-y", help="with --all: do not ask first")] = False,
         host: HostFilter = None,
         remove_worktree: Annotated[bool, typer.Option(
             "--remove-worktree", help="then remove its worktree, only when nothing would be lost (as `mam "
                                       "worktree remove`)")] = False,
         as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.util.render import visible

    if remove_worktree and (all_rows or name is None):
        raise MamError("usage", "--remove-worktree is for one NAME", hint="mam stop NAME --remove-worktree")
    if all_rows:
        return _stop_all(call, name, server, force, yes, host)
    if name is None:
        raise MamError("usage", "mam stop needs NAME or --all", hint="mam stop NAME, or mam stop --all [--yes]")
    if yes:
        raise MamError("usage", "--yes is for --all", hint="mam stop NAME stops one agent without asking")
    from mam.commands.lifecycle import stop_document

    doc = stop_document(call.open(), name, server, force=force, progress=not call.json, host=host)
    # Without a row (--force), nothing was marked: say what the server showed, not a registry status.
    said = f"{doc['status']} ({doc['message']})" if doc["registered"] else f"no row to mark; {doc['message']}"
    if remove_worktree and doc["registered"]:
        if not call.json:
            sys.stdout.write(visible(f"{doc['name']} on {doc['backend']} server {doc['server']}: {said}") + "\n")
        return _remove_worktree(call, call.open(), name, doc["server"], doc["host"] or host, False, False, doc)
    emit(doc, call.json, None if call.json else visible(f"{doc['name']} on {doc['backend']} server "
                                                        f"{doc['server']}: {said}"))
    return 0


def _stop_all(call: Any, name: str | None, server: str | None, force: bool, yes: bool, host: str | None) -> int:
    """`mam stop --all`: the agents listed, a question at a terminal (or --yes), then each stopped in turn."""
    from mam.commands.lifecycle import stop_all_document, stop_targets
    from mam.util.render import visible

    if name is not None:
        raise MamError("usage", "give NAME or --all, not both", hint="mam stop --all stops every running agent")
    if force:
        raise MamError("usage", "--force is for one NAME you give, not for --all",
                       hint="mam stop NAME --force closes that one even when mam did not start it")
    if not yes and not sys.stdin.isatty():
        raise MamError("usage", "mam stop --all asks first, and standard input is not a terminal",
                       hint="add --yes to stop them without asking")
    app = call.open()
    rows = stop_targets(app, server, host)
    where = [f"{r.name} ({r.backend} server {r.server}" + (f" on {r.host}" if r.host else "") + ")" for r in rows]
    if rows and not yes:
        sys.stderr.write(visible(f"mam: stop {len(rows)} agent{'s' if len(rows) != 1 else ''}: "
                                 f"{', '.join(where)}?") + " [y/N] ")
        sys.stderr.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            raise MamError("operation_failed", "nothing stopped: not confirmed", hint="answer y, or add --yes")
    doc = stop_all_document(app, rows, progress=not call.json)
    lines = [visible(f"{a['name']} on {a['backend']} server {a['server']}"
                     + (f" on {a['host']}" if a["host"] else "") + f": {a['outcome']} ({a['message']})")
             for a in doc["agents"]]
    emit(doc, call.json, None if call.json else "\n".join(lines or ["no running agent to stop"]))
    return 1 if doc["counts"]["failed"] or doc["counts"]["left"] else 0


def _ask(agent: dict[str, Any]) -> bool:
    """At a terminal: show a launch spec this user's mam did not sign, everything it would run and hand over,
    and run it only on a yes (`mam top` asks the same, mam.cli.topspawn)."""
    from mam.agents.specsign import CONSENT_QUESTION, doubt_lines
    from mam.util.render import visible

    sys.stderr.write("".join(visible(line) + "\n" for line in doubt_lines(agent)) + f"{CONSENT_QUESTION} [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline(64).strip().lower() in ("y", "yes")


def _removed_text(doc: dict[str, Any]) -> str:
    from mam.registry import ACTIVE_STATUSES
    from mam.util.render import visible

    verb = "would forget" if doc["dry_run"] else "forgot"
    if not doc["removed"]:
        return visible(f"nothing to remove from {doc['registry']}")
    # forget closes nothing: a row registered active may name an agent (or someone's session) that runs on
    return "\n".join(visible(f"{verb} {e['name']} ({e['backend']} server {e['server']}, {e['status']})"
                             + ("; whatever runs under that name is left running" if e["status"] in ACTIVE_STATUSES
                                else "")) for e in doc["removed"])


def forget(ctx: typer.Context,
           names: Annotated[list[str], typer.Argument(metavar="NAME...", autocompletion=complete.agents,
                                                      help="the agents to forget")],
           server: Annotated[str | None, typer.Option("--server", metavar="NAME", autocompletion=complete.servers,
                                                      help="only on this server")] = None,
           force: Annotated[bool, typer.Option("--force",
                                               help="forget rows registered starting or running too")] = False,
           dry_run: DryRun = False,
           remove_worktree: Annotated[bool, typer.Option(
               "--remove-worktree", help="remove each one's worktree first, only when nothing would be lost (as "
                                         "`mam worktree remove`); a row whose worktree stays is not forgotten")
           ] = False,
           as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.commands.forget import forget_document

    if remove_worktree:
        from mam.commands.worktree import remove_document

        app = call.open()

        def remove(name: str, asking: bool, hint: str) -> None:
            # A dry run asks the same question without removing: it must not promise a forget the real one refuses.
            done = remove_document(app, name, server, dry_run=asking)
            if not done["removed"]:
                from mam.agents.worktrees import Losses, Removal, refusal_text

                found = Losses.from_json(done["would_lose"])
                said = refusal_text(name, done["worktree"], Removal(False, found)).split("\n")
                raise MamError("operation_failed", " ".join([said[0], "; ".join(line.strip() for line in said[1:])]),
                               hint=hint)

        # Every one asked first: `forget A B --remove-worktree` removed A's worktree, then refused B and forgot
        # neither, leaving A's row naming a worktree that was gone.
        for name in names:
            remove(name, True, "nothing would be forgotten" if dry_run else
                   "nothing was forgotten" + (", and no worktree removed" if len(names) > 1 else ""))
        if not dry_run:
            for name in names:
                remove(name, False, "nothing was forgotten")

    doc = forget_document(call.open(), names, server, force=force, dry_run=dry_run)
    emit(doc, call.json, _removed_text(doc))
    return 0


def prune(ctx: typer.Context,
          status: Annotated[str | None, typer.Option(
              "--status", metavar="LIST",
              help="comma-separated statuses to remove (default terminated,stopped; never starting or running)")
          ] = None,
          older_than: Annotated[str | None, typer.Option(
              "--older-than", metavar="DAYS", help="only rows whose last change is older")] = None,
          dry_run: DryRun = False,
          as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.commands.forget import parse_days, prune_document

    days = parse_days(older_than)
    statuses = [s for s in (status or "terminated,stopped").split(",") if s]
    doc = prune_document(call.open(), statuses, days, dry_run=dry_run)
    emit(doc, call.json, _removed_text(doc))
    return 0


def exec_(ctx: typer.Context,
          args: Annotated[list[str] | None, typer.Argument(
              metavar="-- ARGS...", help="the backend's own command line, after --", show_default=False)] = None,
          server: Annotated[str | None, typer.Option("--server", metavar="NAME", autocompletion=complete.servers,
                                                     help="the server (default $MAM_SERVER)")] = None,
          host: Host = None) -> int:
    call = begin(ctx, None, takes_trailing=True)
    from mam.commands.passthrough import exec_command

    argv = [*(args or ()), *call.trailing]
    if not argv:
        raise MamError("usage", "mam exec needs the backend's command line after --",
                       hint="e.g. `mam --backend tmux exec --server S -- list-sessions`, or `-- agent list` on herdr")
    program, argv, environ = exec_command(call.open(), server, argv, host)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(program, argv, environ)  # an explicit program and argv, no shell


def restore(ctx: typer.Context,
            names: Annotated[list[str] | None, typer.Argument(
                metavar="[NAME...]", autocompletion=complete.agents, help="the agents to restore",
                show_default=False)] = None,
            all_rows: Annotated[bool, typer.Option(
                "--all", help="every terminated agent, and every running one its server does not list (stopped ones "
                              "only by NAME), backing off and stopping at a crash loop ($MAM_RESTORE_BACKOFF, "
                              "$MAM_RESTORE_LIMIT, $MAM_RESTORE_WINDOW); give NAME... or --all")] = False,
            server: Annotated[str | None, typer.Option("--server", metavar="NAME", autocompletion=complete.servers,
                                                       help="only the rows on this server")] = None,
            host: HostFilter = None,
            dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan, start nothing")] = False,
            trust_spec: Annotated[bool, typer.Option(
                "--trust-spec", help="run launch specs your mam did not sign too (read them first with --dry-run), "
                                     "and sign them as yours")] = False,
            as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.cli.context import say_unanswered
    from mam.commands.restore import restore_document
    from mam.util import render

    if names and all_rows:
        raise MamError("usage", "NAME... and --all contradict each other", hint="drop one of them")
    app = call.open()
    ask = _ask if not call.json and sys.stdin is not None and sys.stdin.isatty() else None  # never in a script
    doc = restore_document(app, names or [], all_rows=all_rows, dry_run=dry_run, progress=not call.json,
                           server=server, host=host, trust_spec=trust_spec, ask=ask)
    code = say_unanswered(app, doc)
    emit(doc, call.json, None if call.json else render.restore_text(doc, dry_run))
    # A named agent left as it was (its server could not be asked, another restore took it), or a spec left
    # unrun for want of consent, is not restored: a script's `mam restore ... && ...` must not go on as if it were.
    skipped = bool(names) and not dry_run and doc["counts"]["skipped"] > 0
    untrusted = not dry_run and doc["counts"]["untrusted"] > 0
    return 1 if doc["counts"]["failed"] or skipped or untrusted else code


Server = Annotated[str | None, typer.Option("--server", metavar="NAME", autocompletion=complete.servers,
                                            help="its server, when the name is on several")]


def worktree_remove(ctx: typer.Context,
                    name: Annotated[str, typer.Argument(metavar="NAME", autocompletion=complete.agents,
                                                        help="the agent whose worktree goes")],
                    server: Server = None,
                    force: Annotated[bool, typer.Option(
                        "--force", help="remove it even with work in it, after saving all of that to a mam/lost/ "
                                        "branch")] = False,
                    delete_branch: Annotated[bool, typer.Option(
                        "--delete-branch", help="delete its branch too, on the same rule")] = False,
                    host: HostFilter = None,
                    as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    return _remove_worktree(call, call.open(), name, server, host, force, delete_branch)


def _remove_worktree(call: Any, app: Any, name: str, server: str | None, host: str | None, force: bool,
                     delete_branch: bool, doc: dict[str, Any] | None = None) -> int:
    """Remove NAME's worktree and say how it went; `doc`: the document of the stop before it, which this one
    joins (`worktree`)."""
    from mam.agents.worktrees import refusal_text
    from mam.commands.worktree import remove_document
    from mam.util.render import visible

    removal = remove_document(app, name, server, host, force=force, delete_branch=delete_branch)
    record = removal["worktree"]
    if removal["removed"]:
        text = f"{name}: worktree {record['path']} " + ("was gone already" if removal["already_gone"] else "removed")
        if removal["saved_to"]:
            text += f"; its work is saved in branch {removal['saved_to']}"
        text += f"; branch {record['branch']} " + ("deleted" if removal["branch_deleted"] else "kept")
    else:
        from mam.agents.worktrees import Losses, Removal

        found = Losses.from_json(removal["would_lose"])
        text = refusal_text(name, record, Removal(False, found))
    if doc is not None:
        doc["worktree"] = removal
        emit(doc, call.json, None)
        if not call.json:
            sys.stdout.write("".join(visible(line) + "\n" for line in text.split("\n")))
    elif call.json or removal["removed"]:
        emit(removal, call.json, None if call.json else visible(text))
    else:
        sys.stderr.write("mam: " + "\n".join(visible(line) for line in text.split("\n")) + "\n")
    return 0 if removal["removed"] else 1


def worktree_list(ctx: typer.Context, as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.commands.worktree import list_document
    from mam.util.render import visible

    doc = list_document(call.open())
    from mam.util.render import work_text

    lines = [visible(f"{e['name']} ({e['status']}): {e['path']} on {e['branch']}: {work_text(e)}")
             for e in doc["worktrees"]]
    emit(doc, call.json, None if call.json else "\n".join(lines or ["no worktree made by mam"]))
    return 0


def worktree_prune(ctx: typer.Context, dry_run: DryRun = False, as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.commands.worktree import prune_document
    from mam.util.render import visible

    doc = prune_document(call.open(), dry_run)
    verb = "would prune" if dry_run else "pruned"
    lines = [visible(f"{e['name']}: {e['path']} is gone: " + (f"{verb} its record" if e["pruned"] else e["reason"]))
             for e in doc["pruned"]]
    emit(doc, call.json, None if call.json else "\n".join(lines or ["no worktree record to prune"]))
    return 0
