"""The servers behind every command: asking them for their agents (one listing call per server, all in
parallel), starting one that is down (scrubbed, one starter at a time), and the call context they all share."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from mam.errors import EXIT_BAD_INPUT, MamError
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
from mam.runner import remote_route, with_route
from mam.safefile import lock_within, open_unfollowed

if TYPE_CHECKING:
    from mam.app import App
    from mam.plugin.manager import Plugins
    from mam.runner import Route

ServerKey = tuple[str, str, str]  # (backend, server, host); host "" is this machine
# The route of a host's calls (mam.remote.Routes.get); None: this machine.
RouteFor = Callable[[str], "Route | None"]
# Work to do for one server right after its listing, in the same thread (status reads its agents' states).
After = Callable[[ServerKey, ServerOutcome], None]
MAX_PARALLEL = 64  # threads mostly wait on their backend process; 64 covers the usual fleet in one wave


def query_server(plugins: Plugins, backend_name: str, server: str, ctx: CallContext,
                 host: str | None = None) -> ServerOutcome:
    """One server's outcome. Never raises: whatever goes wrong is `unknown`, with the reason. On another `host`
    the caller has entered its route (runner.remote_route): the backend's calls go there, unknowing."""
    outcome = _query(plugins, backend_name, server, ctx)
    return replace(outcome, host=host) if host else outcome


def _query(plugins: Plugins, backend_name: str, server: str, ctx: CallContext) -> ServerOutcome:
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
                  after: After | None = None, route_for: RouteFor | None = None) -> dict[ServerKey, ServerOutcome]:
    """Query every server at once; each call has its own time limit, so a slow one delays no other. `after`,
    when given, runs for each server in the thread that listed it, so its own calls overlap the others' too.

    Plain threads pulling from one shared list: concurrent.futures would add start-up cost for nothing
    (bench/RESULTS.md).
    """
    keys = sorted(set(keys))
    routes = _fan_out_routes(keys, route_for)

    def one(key: ServerKey) -> ServerOutcome:
        backend_name, server, host = key
        route = routes.get(host)
        if isinstance(route, MamError):  # the host itself is unusable (its ssh folder): say why
            return ServerOutcome(backend_name, server, ServerState.UNKNOWN, host=host,
                                 error=ServerError(ErrorKind.UNKNOWN, f"host {host}: {route.message}"))
        return with_route(route, _one_here, key)

    def _one_here(key: ServerKey) -> ServerOutcome:
        backend_name, server, host = key
        outcome = query_server(plugins, backend_name, server, ctx, host or None)  # never raises
        if after is not None:
            after(key, outcome)
        return outcome

    if len(keys) <= 1:
        return {key: one(key) for key in keys}
    # Load each backend once, before the threads start, so no two threads import one module.
    for backend_name in {b for b, _, _ in keys}:
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


def _fan_out_routes(keys: list[ServerKey], route_for: RouteFor | None) -> dict[str, Route | MamError | None]:
    """The route of each host of a fan-out, batched: the calls made together to one host share one ssh session
    (mam.batch), `expected` being how many servers of that host are asked. A host whose route cannot be built is
    the error, for its servers to be `unknown` with it; unless the error is the caller's input (a bad
    $MAM_SSH_CONFIG or $MAM_SSH_ENV, a config `keep:` rule): that is raised, exit 2, not one host's trouble."""
    hosts: dict[str, int] = {}
    for _, _, host in keys:
        hosts[host] = hosts.get(host, 0) + 1
    routes: dict[str, Route | MamError | None] = {"": None}
    for host, count in hosts.items():
        if not host:
            continue
        try:
            route = route_for(host) if route_for is not None else None
        except MamError as exc:
            if exc.exit_code == EXIT_BAD_INPUT:
                raise
            routes[host] = exc
            continue
        if route is None:
            raise MamError("operation_failed", f"no route to host {host}")  # a caller's bug: never run it here
        routes[host] = route.batched(count)
    return routes


def require_binary(app: App, outcome_error_kind: ErrorKind | None, what: str, backend: str | None = None,
                   of_row: bool = False) -> None:
    """Raise exit 3 when the backend's program is missing. `of_row`: the backend is a registry row's, which
    another backend cannot reach, so the hint says only to install its program."""
    if outcome_error_kind is ErrorKind.NOT_INSTALLED:
        name = backend or app.backend_name
        spec = app.plugins.spec(name)
        raise MamError("backend_unavailable", f"{spec.executable or spec.name}: not found on PATH; {what}",
                       hint=missing_binary_hint(app, name, of_row))


def missing_binary_hint(app: App, backend: str, of_row: bool = False) -> str:
    """What to do when `backend`'s program is not on PATH: install it, or (unless it is a row's backend: its
    agent runs there, and no other backend reaches it) pick another, named as `--backend` and the workspace's
    `.mam/config.yaml` take it. Another backend whose program is on PATH is named, tmux first."""
    spec = app.plugins.spec(backend)
    program = spec.executable or spec.name
    if of_row:
        return f"install {program}: an agent registered on backend {backend} is reached only through {program}"
    import shutil

    path = app.backend_env.get("PATH")
    try:
        others = [s for s in app.plugins.specs() if s.name != backend]
    except MamError:
        others = []
    found = [s.name for s in others if s.executable and shutil.which(s.executable, path=path)]
    names = sorted(found or [s.name for s in others], key=lambda n: (n != "tmux", n))
    if not names:
        return f"install {program}"
    return (f"install {program}, or pick another backend: `mam --backend {names[0]} ...`, or `backend: {names[0]}` "
            "in .mam/config.yaml")


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
    up afterwards. On another `host` every call of the probe and the start runs there (mam.remote), the scrub
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
    for backend in sorted({b for b, _, _ in keys}):  # first, so that their scrub rules shape the client env
        try:
            app.plugins.backend(backend)
        except MamError:
            pass  # its servers come back unknown, with the reason
    return query_servers(app.plugins, keys, call_context(app), after, app.route)
