"""Starting a server that is down: scrubbed, one starter at a time per server (a lock in the workspace), here
or on another host through its route."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from mam.calls.route import remote_route
from mam.plugin.records import BootstrapContext, BootstrapResult
from mam.servers.availability import require_binary
from mam.util.errors import MamError
from mam.util.safefile import lock_within, open_unfollowed

if TYPE_CHECKING:
    from mam.servers.app import App


@contextmanager
def server_lock(app: App, server: str, host: str | None = None, backend_name: str | None = None) -> Iterator[None]:
    """One probe-and-start at a time per server of a workspace: of several mam commands that found it down,
    the first starts it and the others, waiting here, find it up. Held by flock, so a killed holder frees it.
    (Names never hold '/'; a backend and server pair that reads the same joined by '-' only shares a lock.)
    `backend_name`: the server's backend, when it is not the selected one (restore starts the rows' own)."""
    backend_name = backend_name or app.backend_name
    locks = app.workspace.dot_mam / "locks"
    # A host is never a name (it may hold '@', ':', '.'), so it only ends the file name, after a '@'.
    path = locks / (f"{backend_name}-{server}" + (f"@{host.replace('/', '_')}" if host else "") + ".lock")
    hint = "remove it: mam creates its locks itself"
    try:
        locks.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if locks.is_symlink():  # a dangling link: mkdir says it exists
            raise MamError("operation_failed", f"{locks}: the locks folder is a symbolic link: refusing to follow "
                           "it", hint=hint) from None
        raise MamError("operation_failed", f"{locks}: cannot create the locks folder: {exc.strerror or exc}") from None
    fd = open_unfollowed(path, os.O_RDWR | os.O_CREAT, 0o600, "locks folder", "server lock", hint)
    try:
        # Long enough for one holder's whole bootstrap: its probe, its start call and its wait to come up.
        try:
            locked = lock_within(fd, 2 * app.timeout + app.bootstrap_wait + 1)
        except OSError:
            locked = False
        if not locked:
            raise MamError("operation_failed", f"{backend_name} server {server}: another mam command "
                           f"is still starting it ({path} is locked)", hint="retry when it has finished")
        yield
    finally:
        os.close(fd)  # closing releases the lock


def start_server(app: App, server: str, host: str | None = None,
                 backend_name: str | None = None) -> tuple[BootstrapResult, Path]:
    """Start `server` of the selected backend (or of `backend_name`) if it is down, scrubbed; raise unless it is
    up afterwards. On another `host` every call of the probe and the start runs there (mam.calls.remote), the scrub
    applied there."""
    backend_name = backend_name or app.backend_name
    backend = app.plugins.backend(backend_name)
    spec = app.plugins.spec(backend_name)
    if host and not spec.remote_bootstrap:
        raise MamError("operation_failed", f"backend {backend_name} cannot start a server on another host "
                       f"({host})", hint=f"start it on {host} itself, then run the command again")
    log_path = app.log_path(backend_name, server if not host else f"{server}@{host.replace('/', '_')}")
    ctx = BootstrapContext(timeout=app.timeout, wait=app.bootstrap_wait, env=app.server_env, log_path=log_path,
                           cwd=app.workspace.root)
    where = f" on {host}" if host else ""
    with server_lock(app, server, host, backend_name), remote_route(app.route(host)):  # probe and start: one step
        result = app.plugins.bootstrap(backend, server, ctx)
        error = app.plugins.classify(backend, result.failure) if not result.up and result.failure else None
    if not result.up:
        if error is not None:
            require_binary(app, error.kind, "mam bootstrap needs it", backend_name)
            message = f"{result.message}: {error.message}"
        else:
            message = result.message
        raise MamError("operation_failed", f"{backend_name} server {server}{where} did not come up: {message}",
                       hint=f"see {log_path}" if log_path.exists() else None)
    return result, log_path
