"""`mam serve`: the command alone. The app, the web framework and the metrics library (mam/web/) are imported
only when it runs, so no other command's start-up pays for them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from mam.cli.context import begin, end_children
from mam.util.errors import MamError

# Deferred imports (inside functions), for start-up: `mam serve` loads Starlette, uvicorn and its app only when it
# runs.

INSTALL_HINT = "pip install 'mam[web]' (or: pip install starlette uvicorn prometheus-client)"
WEB_LIBRARIES = ("starlette", "uvicorn", "prometheus_client", "h11", "anyio")


def serve(ctx: typer.Context,
          bind: Annotated[str, typer.Option(
              "--bind", metavar="ADDR:PORT",
              help="the address and port to listen on ([::1]:PORT for IPv6); any address but loopback needs "
                   "--token-file")] = "127.0.0.1:8765",
          token_file: Annotated[str | None, typer.Option(
              "--token-file", metavar="FILE",
              help="the token every request must carry (bearer header, or the login page's cookie); made there "
                   "(mode 0600) when FILE does not exist; kept outside any workspace. Without it, on loopback, "
                   "nothing is asked")] = None,
          read_only: Annotated[bool, typer.Option(
              "--read-only", help="serve the views only: every action (send, answer, stop, restore) is "
                                  "refused")] = False) -> int:
    call = begin(ctx, None)
    from mam.web.guard import parse_bind

    where = parse_bind(bind)
    if not where.loopback and token_file is None:
        raise MamError("usage", f"--bind {bind}: an address other than loopback needs a token",
                       hint="add --token-file ~/.config/mam/serve-token (made there when missing)")
    try:
        from mam.web.server import run
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] not in WEB_LIBRARIES:
            raise
        raise MamError("operation_failed", f"mam serve needs its web libraries, not installed: {INSTALL_HINT}") \
            from None
    from mam.live.actions import Actions
    from mam.web.guard import Guard, check_free, load_token

    check_free(where)  # a taken port said before anything is made or said to be served
    app = call.open()
    token = None
    if token_file is not None:
        token, made = load_token(Path(token_file), app.workspace.root)
        if made:
            sys.stderr.write(f"mam: made a new token in {token_file} (mode 0600): the login page asks for it, "
                             "scripts send it as Authorization: Bearer TOKEN\n")
    guard = Guard(where, token, read_only)
    url = f"http://{where.url_host}:{where.port}/"
    if where.address in ("0.0.0.0", "::"):  # not an address to open: the one others would use
        import socket  # deferred, for start-up: only this branch names the machine

        url += f" (every address; from elsewhere http://{socket.gethostname()}:{where.port}/)"
    sys.stderr.write(f"mam: serving {app.workspace.root} on {url}" + (" (read-only)" if read_only else "")
                     + ("" if token else " (no token: anyone on this machine may use it)") + "\n")
    sys.stderr.flush()
    try:
        run(Actions(app), guard)
    finally:
        end_children()
    return 0
