"""The servers behind every command: asking them for their agents (one listing call per server, all in
parallel), starting one that is down (scrubbed, one starter at a time), and the call context they all share."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from mam.errors import MamError
from mam.plugin.records import (
    BootstrapContext,
    BootstrapResult,
    CallContext,
    ErrorKind,
    Failure,
    ServerError,
    ServerOutcome,
    ServerState,
)
from mam.safefile import lock_within, open_unfollowed

if TYPE_CHECKING:
    from mam.app import App
    from mam.plugin.manager import Plugins

ServerKey = tuple[str, str]  # (backend, server)
# Work to do for one server right after its listing, in the same thread (status reads its agents' states).
After = Callable[[ServerKey, ServerOutcome], None]
MAX_PARALLEL = 64  # threads mostly wait on their backend process; 64 covers the usual fleet in one wave


def query_server(plugins: Plugins, backend_name: str, server: str, ctx: CallContext) -> ServerOutcome:
    """One server's outcome. Never raises: whatever goes wrong is `unknown`, with the reason."""
    try:
        backend = plugins.backend(backend_name)
    except MamError as exc:
        kind = ErrorKind.NOT_INSTALLED if exc.code == "backend_not_found" else ErrorKind.UNKNOWN
        return ServerOutcome(backend_name, server, ServerState.UNKNOWN, error=ServerError(kind, exc.message))
    try:
        listing = plugins.list_agents(backend, server, ctx)
        if not isinstance(listing, Failure):
            return ServerOutcome(backend_name, server, ServerState.UP, tuple(listing))
        error = plugins.classify(backend, listing)
    except Exception as exc:  # a plugin bug must not spoil the other servers' answers
        return ServerOutcome(backend_name, server, ServerState.UNKNOWN,
                             error=ServerError(ErrorKind.UNKNOWN, f"backend {backend_name} failed: {exc!r}"))
    state = ServerState.DOWN if error.kind is ErrorKind.SERVER_DOWN else ServerState.UNKNOWN
    return ServerOutcome(backend_name, server, state, error=error)


def query_servers(plugins: Plugins, keys: Iterable[ServerKey], ctx: CallContext,
                  after: After | None = None) -> dict[ServerKey, ServerOutcome]:
    """Query every server at once; each call has its own time limit, so a slow one delays no other. `after`,
    when given, runs for each server in the thread that listed it, so its own calls overlap the others' too.

    Plain threads pulling from one shared list: concurrent.futures would add start-up cost for nothing
    (bench/RESULTS.md).
    """
    keys = sorted(set(keys))

    def one(key: ServerKey) -> ServerOutcome:
        outcome = query_server(plugins, *key, ctx)  # never raises
        if after is not None:
            after(key, outcome)
        return outcome

    if len(keys) <= 1:
        return {key: one(key) for key in keys}
    # Load each backend once, before the threads start, so no two threads import one module.
    for backend_name in {b for b, _ in keys}:
        try:
            plugins.backend(backend_name)
        except MamError:
            pass
    import threading

    pending = iter(keys)
    lock = threading.Lock()
    results: dict[ServerKey, ServerOutcome] = {}

    def worker() -> None:
        while True:
            with lock:
                key = next(pending, None)
            if key is None:
                return
            results[key] = one(key)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(MAX_PARALLEL, len(keys)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {key: results[key] for key in keys}


def require_binary(app: App, outcome_error_kind: ErrorKind | None, what: str, backend: str | None = None) -> None:
    if outcome_error_kind is ErrorKind.NOT_INSTALLED:
        spec = app.plugins.spec(backend or app.backend_name)
        raise MamError("backend_unavailable", f"{spec.executable or spec.name}: not found on PATH; {what}",
                       hint=f"install {spec.executable or spec.name}, or choose another backend with --backend")


@contextmanager
def server_lock(app: App, server: str) -> Iterator[None]:
    """One probe-and-start at a time per server of a workspace: of several mam commands that found it down,
    the first starts it and the others, waiting here, find it up. Held by flock, so a killed holder frees it.
    (Names never hold '/'; a backend and server pair that reads the same joined by '-' only shares a lock.)"""
    locks = app.workspace.dot_mam / "locks"
    path = locks / f"{app.backend_name}-{server}.lock"
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
            raise MamError("operation_failed", f"{app.backend_name} server {server}: another mam command "
                           f"is still starting it ({path} is locked)", hint="retry when it has finished")
        yield
    finally:
        os.close(fd)  # closing releases the lock


def start_server(app: App, server: str) -> tuple[BootstrapResult, Path]:
    """Start `server` of the selected backend if it is down, scrubbed; raise unless it is up afterwards."""
    backend = app.plugins.backend(app.backend_name)
    log_path = app.log_path(app.backend_name, server)
    ctx = BootstrapContext(timeout=app.timeout, wait=app.bootstrap_wait, env=app.server_env, log_path=log_path,
                           cwd=app.workspace.root)
    with server_lock(app, server):  # the backend's probe and start, as one step
        result = app.plugins.bootstrap(backend, server, ctx)
    if not result.up:
        if result.failure is not None:
            error = app.plugins.classify(backend, result.failure)
            require_binary(app, error.kind, "mam bootstrap needs it")
            message = f"{result.message}: {error.message}"
        else:
            message = result.message
        raise MamError("operation_failed", f"{app.backend_name} server {server} did not come up: {message}",
                       hint=f"see {log_path}" if log_path.exists() else None)
    return result, log_path


def resolve_explicit_backend(app: App) -> str | None:
    """An explicitly selected backend must exist and load (exit 3 or 4); its binary may still be missing."""
    explicit = app.explicit_backend
    if explicit is not None:
        app.plugins.backend(explicit)
    return explicit


def call_context(app: App) -> CallContext:
    return CallContext(timeout=app.timeout, env=app.backend_env)


def outcomes_for(app: App, keys: set[ServerKey], after: After | None = None) -> Mapping[ServerKey, ServerOutcome]:
    if not keys:
        return {}
    for backend in sorted({b for b, _ in keys}):  # first, so that their scrub rules shape the client env
        try:
            app.plugins.backend(backend)
        except MamError:
            pass  # its servers come back unknown, with the reason
    return query_servers(app.plugins, keys, call_context(app), after)
