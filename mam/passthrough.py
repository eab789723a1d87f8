"""`mam exec` and the shim: a backend's own CLI against one named server, with mam's guarantees
(the server started scrubbed when it is down, the environment scrubbed, the server named explicitly)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from mam.app import App
from mam.commands import start_server
from mam.errors import MamError
from mam.model import CallContext, ServerState
from mam.names import check_name
from mam.query import query_server

SHIM_MARKER = ".mam-shim"  # a folder holding this file is a shim folder: never searched for a real binary
SHIMS = ("herdr", "tmux", "zellij")


def path_without_shims(path: str) -> str:
    """PATH without mam's shim folders, so the real binary is found and a shim never runs itself."""
    return os.pathsep.join(p for p in path.split(os.pathsep) if p and not (Path(p) / SHIM_MARKER).exists())


def exec_command(app: App, server: str | None, args: list[str]) -> tuple[str, list[str], dict[str, str]]:
    """The program, argv and environment `mam exec` replaces itself with."""
    name = server or app.env.get("MAM_SERVER")
    if not name:
        raise MamError("usage", "mam exec needs a server", hint="pass --server NAME or set MAM_SERVER")
    check_name(name, "server name")
    backend = app.plugins.backend(app.backend_name)
    argv = app.plugins.client_argv(backend, name, args)
    if not argv:  # a plugin wrapping the hook may still decline
        raise MamError("operation_failed", f"backend {app.backend_name} cannot run its own command line")
    env = dict(app.server_env)
    env["PATH"] = path_without_shims(env.get("PATH", ""))
    program = shutil.which(argv[0], path=env["PATH"])
    if program is None:
        raise MamError("backend_unavailable", f"{argv[0]}: not found on PATH",
                       hint=f"install {argv[0]}, or choose another backend with --backend")
    if app.env.get("MAM_NO_AUTOSTART") != "1":
        outcome = query_server(app.plugins, app.backend_name, name, CallContext(app.timeout, app.backend_env))
        if outcome.state is ServerState.DOWN:
            start_server(app, name)
    return program, [argv[0], *argv[1:]], env


def shim_source(backend: str) -> str:
    return (f"#!{sys.executable}\n"
            f"# mam shim: `{backend} ARGS` runs as `mam --backend {backend} exec -- ARGS` against $MAM_SERVER.\n"
            "import os\nimport sys\n\n"
            f"os.execv(sys.executable, [sys.executable, '-m', 'mam', '--backend', '{backend}', 'exec', '--',"
            " *sys.argv[1:]])\n")


def install_shims(directory: Path) -> list[Path]:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / SHIM_MARKER).write_text("mam shim folder: mam never looks for real binaries here\n")
        written = []
        for backend in SHIMS:
            path = directory / backend
            path.write_text(shim_source(backend))
            path.chmod(0o755)
            written.append(path)
    except OSError as exc:
        raise MamError("operation_failed", f"{directory}: cannot write the shims: {exc.strerror or exc}") from None
    return written
