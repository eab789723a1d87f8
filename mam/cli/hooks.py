"""`mam hooks install|uninstall|status` (mam.hooks) and `mam report STATE` (mam.hooks.report; the entry point
answers it before this package is loaded, so this is its --help and its path when run by `mam.cli`)."""

import os
import sys
from typing import Annotated, Any

import typer

from mam.cli.context import begin, emit
from mam.cli.options import Json

# Deferred imports (inside functions), for start-up: each command loads the core it runs inside it, so `mam --help`
# loads none of it.

Agents = Annotated[list[str] | None, typer.Option(
    "--agent", metavar="KIND", help="only this kind: claude, codex (config.toml's notify and hooks.json) or gemini "
    "(repeatable; default: all three)")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="show the diff, change nothing")]


def _run(ctx: typer.Context, as_json: bool, agents: list[str] | None, step: Any, verb: str | None = None) -> int:
    call = begin(ctx, as_json)
    from mam.hooks.ops import PLAIN, chosen
    from mam.util.render import visible

    changes = [step(kind, dict(os.environ)) for kind in chosen(agents or [])]
    doc = {"schema": 1, "hooks": [c.as_json() for c in changes]}
    lines = []
    for change in changes:
        # status: its word first (installed, partial, absent, unreadable), as docs/cli.md names them
        said = change.message
        if change.action == "status" and change.state:
            plain = PLAIN.get(change.state, "")
            said = change.state + said[len(plain):] if plain and said.startswith(plain) else f"{change.state}: {said}"
        if not change.file:  # no place for it ($HOME unset)
            lines.append(visible(f"{change.agent}: {said}"))
        else:
            lines.append(visible(f"{change.agent}: {said} ({change.file})" if change.action == "status"
                                 else f"{change.agent}: {change.file}: {said}"))
        if change.diff and not call.json and change.action.startswith("would"):
            lines.extend(visible(line) for line in change.diff.rstrip("\n").split("\n"))
    if verb is not None:
        _record(call.workspace, verb, changes)
    emit(doc, call.json, "\n".join(lines))
    return 1 if any(c.action == "refused" for c in changes) else 0


def _record(workspace: str | None, verb: str, changes: list[Any]) -> None:
    """Each change of the agents' hook files in the audit trail of the workspace, when it has a `.mam` already:
    the files are the user's, not a workspace's, so no `.mam` is made for them."""
    acted = [c for c in changes if c.action in ("installed", "uninstalled", "refused")]
    if not acted:
        return
    from mam.audit.trail import record
    from mam.config.workspace import open_workspace

    try:
        dot_mam = open_workspace(workspace).dot_mam
    except Exception:  # a workspace mam cannot open: the hooks were written, there is no trail to add to
        return
    if not dot_mam.is_dir():
        return
    for change in acted:
        record(dot_mam, verb, None, {"kind": change.agent, "file": change.file},
               "refused" if change.action == "refused" else "ok", 1 if change.action == "refused" else 0,
               change.message)


def install(ctx: typer.Context, agent: Agents = None, dry_run: DryRun = False,
            absolute: Annotated[bool, typer.Option(
                "--absolute", help="the hooks run this mam by its absolute path, not the `mam` first on the agent's "
                "PATH (for an agent started outside this mam's virtualenv)")] = False,
            as_json: Json = False) -> int:
    from mam.hooks import common
    from mam.hooks.ops import install as step

    if absolute:
        path = common.running_mam()
        if path is None:
            from mam.util.errors import MamError

            raise MamError("usage", "--absolute: cannot tell this mam's path (run it as the `mam` script)")
        common.use_absolute(path)
    code = _run(ctx, as_json, agent, lambda kind, env: step(kind, env, dry_run, bool(agent)), "hooks install")
    if not absolute:
        _warn_of_another_mam(common)
    return code


def _warn_of_another_mam(common: Any) -> None:
    """The hooks run `mam` from the agent's PATH: say so when that is not this mam (or no mam at all)."""
    this = common.running_mam()
    found = common.mam_on_path(os.environ)
    if this is None or found == os.path.realpath(this):
        return
    from mam.util.render import visible

    there = f"is {found}" if found else "is not found"
    sys.stderr.write(visible(f"warning: the hooks run `mam report`, and `mam` on this PATH {there}, not this mam "
                             f"({this}): an agent started with this PATH will not report to it; `mam hooks install "
                             "--absolute` writes this mam's path instead") + "\n")


def uninstall(ctx: typer.Context, agent: Agents = None, dry_run: DryRun = False, as_json: Json = False) -> int:
    from mam.hooks.ops import uninstall as step

    return _run(ctx, as_json, agent, lambda kind, env: step(kind, env, dry_run), "hooks uninstall")


def status(ctx: typer.Context, agent: Agents = None, as_json: Json = False) -> int:
    from mam.hooks.ops import status as step

    code = _run(ctx, as_json, agent, step)
    if not as_json and not agent:
        from mam.hooks.catalog import WITHOUT_HOOKS

        sys.stdout.write("".join(f"{kind}: no hooks ({why})\n" for kind, why in WITHOUT_HOOKS.items()))
    return code


def report(ctx: typer.Context,
           state: Annotated[str, typer.Argument(metavar="STATE", help="working, blocked, idle or done")],
           extra: Annotated[list[str] | None, typer.Argument(
               metavar="[WORDS]...", help="ignored: what an agent appends (Codex's event)")] = None) -> int:
    """Write the calling agent's state to .mam/reports/<$MAM_AGENT>.json of $MAM_WORKSPACE; outside an agent
    mam spawned, do nothing."""
    from mam.hooks.report import main

    return main([state, *(extra or [])])
