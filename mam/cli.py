"""The command line. The only module that imports the CLI framework; the core never does.

Core modules are imported inside each command, so `mam --help` and `mam version` load neither plugins
nor YAML.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from mam import __version__
from mam.errors import EXIT_BAD_INPUT, MamError

if TYPE_CHECKING:
    from mam.app import App

# typer 0.28 vendors click; reach its exception classes through typer's public ones, whichever click it uses.
_UsageError: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
_ClickException: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")

app = typer.Typer(
    name="mam",
    help="mam, the multi-agent mux: track the coding agents running in terminal multiplexer panes.",
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


class Globals:
    backend: str | None = None
    workspace: str | None = None


def _open() -> App:
    from mam.app import App

    return App.open(Globals.workspace, Globals.backend)


def _emit(doc: dict[str, Any], as_json: bool, text: str | None = None, compact: bool = False) -> None:
    if as_json:
        sys.stdout.write(json.dumps(doc, separators=(",", ":")) if compact else json.dumps(doc, indent=2))
        sys.stdout.write("\n")
    elif text is not None:
        sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"mam {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    backend: Annotated[str | None, typer.Option(
        "--backend", "-b", metavar="NAME",
        help="Backend to use: herdr (default), tmux, zellij, or a plugin's. Also $MAM_BACKEND, then "
             "`backend:` in .mam/config.yaml.")] = None,
    workspace: Annotated[str | None, typer.Option(
        "--workspace", metavar="DIR", help="Project directory holding .mam/ (default: discovered).")] = None,
    version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    Globals.backend = backend
    Globals.workspace = workspace


@app.command()
def status(
    json_: JsonFlag = False,
    server: Annotated[list[str] | None, typer.Option(
        "--server", metavar="NAME", help="Only this server of the selected backend (repeatable).")] = None,
) -> None:
    """Every registry row with what its server says about it now. Never starts a server."""
    from mam import render
    from mam.status import status_document

    doc = status_document(_open(), server or ())
    _emit(doc, json_, None if json_ else render.status_text(doc))


@app.command()
def reconcile(
    json_: JsonFlag = False,
    apply: Annotated[bool, typer.Option("--apply", help="Write the fixes to the registry (only writing form).")]
    = False,
    adopt: Annotated[bool, typer.Option("--adopt", help="Register live named agents that have no row.")] = False,
    watch: Annotated[float | None, typer.Option("--watch", metavar="SECONDS",
                                                help="Repeat every SECONDS until interrupted.")] = None,
    once: Annotated[bool, typer.Option("--once", help="One pass (the default).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write nothing (the default).")] = False,
    emit_diff: Annotated[bool, typer.Option("--emit-diff", help="Print the report (the default).")] = False,
) -> None:
    """Compare the registry with the live servers and report drift; fix it only with --apply."""
    from mam import render
    from mam.reconcile import reconcile_document

    if apply and dry_run:
        raise MamError("usage", "--apply and --dry-run contradict each other", hint="drop one of them")
    if watch is not None and watch <= 0:
        raise MamError("usage", "--watch takes a positive number of seconds")
    ctx = _open()
    if watch is None or once:
        doc = reconcile_document(ctx, apply=apply, adopt=adopt)
        _emit(doc, json_, None if json_ else render.reconcile_text(doc))
        return
    try:
        while True:
            doc = reconcile_document(ctx, apply=apply, adopt=adopt)
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            _emit(doc, json_, None if json_ else f"--- {stamp}\n{render.reconcile_text(doc)}", compact=True)
            time.sleep(watch)
    except KeyboardInterrupt:
        return


@app.command()
def ls(
    server: Annotated[str, typer.Option("--server", metavar="NAME", help="The server to list.")],
    json_: JsonFlag = False,
) -> None:
    """The live agents of one server of the selected backend, straight from the backend."""
    from mam import render
    from mam.commands import ls_document
    from mam.model import ServerState

    doc, outcome = ls_document(_open(), server)
    _emit(doc, json_, None if json_ else render.ls_text(doc))
    if outcome.state is ServerState.UNKNOWN:
        raise typer.Exit(1)


@app.command()
def bootstrap(
    server: Annotated[str, typer.Option("--server", metavar="NAME", help="The server to start.")],
    json_: JsonFlag = False,
) -> None:
    """Start a server of the selected backend if it is down, with a scrubbed environment."""
    from mam.commands import bootstrap_document

    doc = bootstrap_document(_open(), server)
    _emit(doc, json_, None if json_ else f"{doc['backend']} server {doc['server']} is up ({doc['message']})")


@app.command()
def spawn(
    name: Annotated[str, typer.Argument(help="The agent's name, unique on its server.")],
    args: Annotated[list[str] | None, typer.Argument(help="Arguments for the agent, after --.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", metavar="KIND",
                                              help="Agent kind: claude, codex, gemini, opencode, ...")] = None,
    server: Annotated[str | None, typer.Option("--server", metavar="NAME",
                                               help="Server to start it on (default $MAM_SERVER, else mam).")]
    = None,
    cwd: Annotated[str | None, typer.Option("--cwd", metavar="DIR", help="Working directory.")] = None,
    command: Annotated[str | None, typer.Option("--command", metavar="CMD",
                                                help="Run this command instead of the agent's own program.")]
    = None,
    json_: JsonFlag = False,
) -> None:
    """Start an agent in a new pane or session, registered at once; starts its server if it is down."""
    from mam.lifecycle import spawn_document

    doc = spawn_document(_open(), name, agent=agent, server=server, cwd=cwd, command=command, args=args or [])
    s = doc["session"]
    _emit(doc, json_, None if json_ else f"{s['name']} is {s['status']} on {s['backend']} server {s['server']} "
                                          f"(pane {s['pane_id']}, cwd {s['cwd']})")


@app.command()
def stop(
    name: Annotated[str, typer.Argument(help="The agent to stop.")],
    server: Annotated[str | None, typer.Option("--server", metavar="NAME", help="Its server.")] = None,
    json_: JsonFlag = False,
) -> None:
    """Close an agent's pane or session and mark it stopped (terminated when it was already gone)."""
    from mam.lifecycle import stop_document

    doc = stop_document(_open(), name, server)
    _emit(doc, json_, None if json_ else f"{doc['name']} on {doc['backend']} server {doc['server']}: "
                                          f"{doc['status']} ({doc['message']})")


@app.command(name="exec")
def exec_(
    args: Annotated[list[str], typer.Argument(help="The backend's own command line, after --.")],
    server: Annotated[str | None, typer.Option("--server", metavar="NAME",
                                               help="The server (default $MAM_SERVER).")] = None,
) -> None:
    """Run the backend's own CLI against one server (herdr --session S ..., tmux -L S ...), scrubbed.

    Starts the server first if it is down, unless MAM_NO_AUTOSTART=1. Its output and exit code are the
    backend's own.
    """
    from mam.passthrough import exec_command

    program, argv, env = exec_command(_open(), server, args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(program, argv, env)  # noqa: S606 - explicit program and argv, no shell


shim_app = typer.Typer(help="Shims that route herdr, tmux and zellij through `mam exec`.", no_args_is_help=True)
app.add_typer(shim_app, name="shim")


@shim_app.command("install")
def shim_install(
    directory: Annotated[str | None, typer.Option("--dir", metavar="DIR",
                                                  help="Where to write them (default .mam/shim/).")] = None,
) -> None:
    """Write `herdr`, `tmux` and `zellij` shims; put DIR first on PATH and set MAM_SERVER to use them."""
    from pathlib import Path

    from mam.passthrough import install_shims

    target = Path(directory) if directory else _open().workspace.dot_mam / "shim"
    for path in install_shims(target):
        typer.echo(str(path))
    typer.echo(f'use them with: export PATH="{target.resolve()}:$PATH" MAM_SERVER=NAME', err=True)


skills_app = typer.Typer(help="Agent skills that drive mam.", no_args_is_help=True)
app.add_typer(skills_app, name="skills")


@skills_app.command("install")
def skills_install(
    dest: Annotated[str | None, typer.Option("--dest", metavar="DIR",
                                             help="Where to put them (default .agents/skills/; e.g. "
                                                  ".claude/skills/).")] = None,
) -> None:
    """Copy the multi-agent-mux skills (status, monitor, spawn) into a project."""
    from pathlib import Path

    from mam.skills import DEFAULT_DEST, install_skills

    target = Path(dest) if dest else _open().workspace.root / DEFAULT_DEST
    for path in install_skills(target):
        typer.echo(str(path))


@app.command()
def demo() -> None:
    """Show mam at work on a private tmux server: spawn, status, drift, reconcile --apply; then clean up."""
    from mam.demo import run_demo

    raise typer.Exit(run_demo(typer.echo))


@app.command()
def backends(json_: JsonFlag = False) -> None:
    """Installed backends: where each comes from, its binary, its version, load errors."""
    from mam import render
    from mam.commands import backends_document

    doc = backends_document(_open())
    _emit(doc, json_, None if json_ else render.backends_text(doc))


@app.command()
def env(json_: JsonFlag = False) -> None:
    """The environment a server bootstrap would get: what is removed, and which rule removed it."""
    from mam import render
    from mam.commands import env_document

    doc = env_document(_open())
    _emit(doc, json_, None if json_ else render.env_text(doc))


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"mam {__version__}")


def _wants_json(argv: list[str]) -> bool:
    args = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in args


def _fail(error: MamError, as_json: bool) -> NoReturn:
    sys.stderr.write(f"mam: {error.message}\n")
    if error.hint:
        sys.stderr.write(f"hint: {error.hint}\n")
    if as_json:
        sys.stdout.write(json.dumps(error.as_json()) + "\n")
    sys.stdout.flush()
    sys.exit(error.exit_code)


def main(argv: list[str] | None = None) -> NoReturn:
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = _wants_json(args)
    try:
        code = app(args=args, prog_name="mam", standalone_mode=False)
    except MamError as exc:
        _fail(exc, as_json)
    except _UsageError as exc:
        ctx = getattr(exc, "ctx", None)
        command = ctx.command_path if ctx is not None else "mam"
        _fail(MamError("usage", exc.format_message(), hint=f"run '{command} --help'"), as_json)  # type: ignore[attr-defined]
    except _ClickException as exc:
        _fail(MamError("usage", exc.format_message()), as_json)  # type: ignore[attr-defined]
    except typer.Abort:
        sys.stderr.write("mam: interrupted\n")
        sys.exit(130)
    except KeyboardInterrupt:
        sys.stderr.write("mam: interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        os._exit(0)
    except Exception as exc:
        if os.environ.get("MAM_DEBUG") == "1":
            raise
        _fail(MamError("operation_failed", f"internal error: {type(exc).__name__}: {exc}",
                       hint="rerun with MAM_DEBUG=1 for a traceback, and report it"), as_json)
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["EXIT_BAD_INPUT", "app", "main"]
