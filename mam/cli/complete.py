"""Shell completion of the names mam knows: server names for --server, agent names for `stop NAME`, `forget
NAME...` and the NAME of wait, send, peek and attach. They come from the registry file alone (mam.registry.load):
completing starts no server, loads no plugin, and never fails loudly; whatever goes wrong, the shell is offered
nothing.

typer and click do the rest: `mam --install-completion` and `--show-completion` write or print the script of
bash, zsh or fish, which calls `mam` back with $_MAM_COMPLETE set.
"""

import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NoReturn

import click

if TYPE_CHECKING:
    from mam.registry import Row

# Deferred imports (inside functions), for start-up: completion reads the registry only when it offers names.

VARIABLE = "_MAM_COMPLETE"
SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _rows(ctx: click.Context) -> list["Row"]:
    """The rows a command on this line would act on: those of the backend chosen explicitly, else every
    backend's for the commands whose rows say which backend (status, stop, forget, wait, send, peek, attach),
    else the selected backend's; read as `mam` itself would find the workspace and the backend."""
    from mam import registry
    from mam.config.workspace import DEFAULT_BACKEND, open_workspace

    root = ctx.find_root().params
    workspace = open_workspace(root.get("workspace"))
    default = workspace.config.backend or DEFAULT_BACKEND
    rows = registry.load(workspace.registry_path, default, workspace.registry_within).rows
    chosen = root.get("backend") or os.environ.get("MAM_BACKEND") or None
    if chosen is None and ctx.command.name not in ("status", "stop", "forget", "wait", "send", "peek", "attach"):
        chosen = default
    return [row for row in rows if chosen is None or row.backend == chosen]


def _offer(ctx: click.Context, incomplete: str, pick: Callable[[list["Row"]], Iterable[str]],
           taken: Iterable[str] = ()) -> list[str]:
    from mam.util.names import is_valid_name

    try:
        names = set(pick(_rows(ctx))) - set(taken)
    except Exception:  # a broken registry or config: no completions, and no traceback in the shell
        return []
    return sorted(name for name in names if is_valid_name(name) and name.startswith(incomplete))


def servers(ctx: click.Context, incomplete: str) -> list[str]:
    return _offer(ctx, incomplete, lambda rows: (row.server for row in rows))


def agents(ctx: click.Context, incomplete: str) -> list[str]:
    """Agent names, on the --server already given if there is one; `forget` offers a name only once."""
    server = ctx.params.get("server")
    return _offer(ctx, incomplete, lambda rows: (row.name for row in rows if server in (None, row.server)),
                  taken=ctx.params.get("names") or ())


def respond(build: Callable[[], click.Command]) -> NoReturn:
    """Answer the shell's completion request, typer's way (`complete_bash`, `source_zsh`). click's own order
    (`bash_complete`, `zsh_source`) is taken too."""
    shell, _, action = os.environ[VARIABLE].partition("_")
    if shell in SHELLS and action in ("complete", "source"):
        os.environ[VARIABLE] = f"{action}_{shell}"
    try:
        build().main(args=[], prog_name="mam", complete_var=VARIABLE)
    except SystemExit:
        raise
    except Exception:
        if os.environ.get("MAM_DEBUG") == "1":
            raise
    sys.exit(1)
