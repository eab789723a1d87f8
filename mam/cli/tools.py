"""The commands that set mam up or show it: shim install, skills install, demo."""

import shlex
import sys
from typing import Annotated, Any

import typer

from mam.cli.context import begin, emit
from mam.cli.options import Json

# Deferred imports (inside functions), for start-up: each command loads the core it runs inside it, so `mam --help`
# loads none of it.


def shim_install(ctx: typer.Context,
                 folder: Annotated[str | None, typer.Option(
                     "--dir", metavar="DIR", help="where to write them (default .mam/shim/)")] = None,
                 as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from pathlib import Path

    from mam.calls.shims import install_shims, shimmed_backends
    from mam.util.render import visible

    app = call.open()
    target = Path(folder) if folder else app.workspace.dot_mam / "shim"
    # The workspace's own folder (a clone can fill it) must hold nothing but the shims; a --dir is the user's.
    written = install_shims(target, shimmed_backends(app.plugins.specs()), only_shims=folder is None)
    shims = [str(path) for path in written]
    where = str(target.resolve())
    emit({"schema": 1, "dir": where, "shims": shims}, call.json, "\n".join(map(visible, shims)))
    # A line to paste into a shell: a DIR with $(...), quotes or backquotes is single-quoted, never expanded.
    path = f'"{where}:$PATH"' if shlex.quote(where) == where else f'{shlex.quote(where)}:"$PATH"'
    print(visible(f"use them with: export PATH={path} MAM_SERVER=NAME"), file=sys.stderr)
    return 0


def skills_install(ctx: typer.Context,
                   dest: Annotated[str | None, typer.Option(
                       "--dest", metavar="DIR",
                       help="where to put them (default .agents/skills/; e.g. .claude/skills/)")] = None,
                   force: Annotated[bool, typer.Option(
                       "--force", help="overwrite files that differ from mam's (your edits, or an older mam's copy)")
                   ] = False,
                   as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from pathlib import Path

    from mam.commands.skills import DEFAULT_DEST, install_skills
    from mam.util.render import visible

    root: Path | None = None
    if dest:
        target = Path(dest)
    else:
        root = call.open().workspace.root
        target = root / DEFAULT_DEST
    skills = [str(path) for path in install_skills(target, force=force, within=root)]
    emit({"schema": 1, "dest": str(target.resolve()), "skills": skills}, call.json, "\n".join(map(visible, skills)))
    return 0


def demo(ctx: typer.Context, as_json: Json = False) -> int:
    call = begin(ctx, as_json)
    from mam.cli.demo import run_demo

    if not call.json:
        return run_demo(print)
    steps: list[dict[str, Any]] = []
    code = run_demo(lambda line: None, steps.append)
    emit({"schema": 1, "steps": steps}, True)
    return code
