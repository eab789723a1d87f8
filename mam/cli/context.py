"""What every command shares: the root's options, the checks each command makes before it runs, and output."""

from __future__ import annotations

import json
import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from mam.util.errors import EXIT_BACKEND_NOT_FOUND, MamError

if TYPE_CHECKING:
    from mam.servers.app import App

# Deferred imports (inside functions), for start-up: the context, the status document and the progress line load only
# for the commands using them.

# Why a command takes no --json, where there is more to say than that it has none.
NO_JSON_BECAUSE = {"mam exec": "its output is the backend's own", "mam attach": "it runs the backend's own client",
                   "mam top": "it is a live view; `mam status --json` prints the same rows once",
                   "mam serve": "it is a server; its API answers in JSON (docs/serve.md)"}


@dataclass
class State:
    """The click context's `obj`: the words after `--`, then the root command's options."""

    trailing: list[str] = field(default_factory=list)
    backend: str | None = None
    workspace: str | None = None
    json: bool = False


@dataclass(frozen=True)
class Call:
    """One command's view of the root options, once its checks have passed."""

    backend: str | None
    workspace: str | None
    json: bool
    trailing: list[str]

    def open(self) -> App:
        from mam.servers.app import App

        return App.open(self.workspace, self.backend)


def no_json(path: str) -> MamError:
    because = NO_JSON_BECAUSE.get(path)
    return MamError("usage", f"{path} takes no --json" + (f": {because}" if because else ""),
                    hint=f"run '{path} --help'")


def _refuse_trailing(state: State) -> None:
    if state.trailing:
        raise MamError("usage", "only spawn, exec and send take arguments after --", hint="run 'mam --help'")


def begin(ctx: click.Context, as_json: bool | None, takes_trailing: bool = False) -> Call:
    """The checks of every command, after click has parsed it and before anything runs, in this order: a stray
    word, words after `--` for a command that takes none, `mam --json` for a command without --json (None)."""
    state = ctx.ensure_object(State)
    if ctx.args:
        raise MamError("usage", f"unexpected argument {ctx.args[0]!r}", hint=f"run '{ctx.command_path} --help'")
    if not takes_trailing:
        _refuse_trailing(state)
    if as_json is None and state.json:
        raise no_json(ctx.command_path)
    return Call(state.backend, state.workspace, bool(as_json) or state.json, state.trailing)


def show_help(ctx: click.Context) -> int:
    """`mam`, `mam shim` and `mam skills` alone print their help (exit 0); with --json that is no document."""
    state = ctx.ensure_object(State)
    _refuse_trailing(state)
    if state.json:
        raise MamError("usage", f"{ctx.command_path} alone prints its help, not a JSON document",
                       hint=f"run '{ctx.command_path} --help'")
    click.echo(ctx.get_help())
    return 0


def emit(doc: dict[str, Any], as_json: bool, text: str | None = None, compact: bool = False) -> None:
    """Print the command's document or text. Output that cannot be written (a full disk, a closed or failing
    stdout) is an operation that failed, exit 1; a reader that went away (`| head`) is not (mam.cli.main)."""
    try:
        if as_json:
            sys.stdout.write(json.dumps(doc, separators=(",", ":")) if compact else json.dumps(doc, indent=2))
            sys.stdout.write("\n")
        elif text is not None:
            sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise MamError("operation_failed", f"cannot write the output: {exc.strerror or exc}") from None


def say_unanswered(app: App, doc: dict[str, Any]) -> int:
    """Servers that could not be asked are said first, on stderr; a missing backend binary is exit 3."""
    from mam.agents.statusview import unanswered
    from mam.util.render import visible

    notes, binary_missing = unanswered(app, doc)
    for note in notes:
        sys.stderr.write(f"mam: {visible(note)}\n")
    sys.stderr.flush()
    return EXIT_BACKEND_NOT_FOUND if binary_missing else 0


def end_children() -> None:
    """An interrupted command leaves no backend process behind (they run in sessions of their own), nor the
    process that reads screens for its threads (mam.kinds.worker)."""
    runner = sys.modules.get("mam.calls.runner")
    if runner is not None:
        runner.kill_running()
    worker = sys.modules.get("mam.kinds.worker")
    if worker is not None:
        worker.stop()


def waiting(what: str, as_json: bool) -> AbstractContextManager[None]:
    """A progress line on a terminal's stderr for waits over a second (mam.util.progress), loaded only there."""
    if as_json or not sys.stderr.isatty():
        from contextlib import nullcontext

        return nullcontext()
    from mam.util.progress import waiting as progress

    return progress(what)
