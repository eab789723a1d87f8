"""Asking servers for their agents: one listing call per server, all in parallel, each within its own time
limit; a server on another host through its route, the calls to one host in one ssh session (mam.calls.batch)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from mam.calls.route import with_route
from mam.plugin.records import CallContext, ErrorKind, Failure, ServerError, ServerOutcome, ServerState
from mam.util.errors import EXIT_BAD_INPUT, MamError

if TYPE_CHECKING:
    from mam.calls.route import Route
    from mam.plugin.manager import Plugins
    from mam.servers.app import App

ServerKey = tuple[str, str, str]  # (backend, server, host); host "" is this machine
# The route of a host's calls (mam.calls.remote.Routes.get); None: this machine.
RouteFor = Callable[[str], "Route | None"]
# Work to do for one server right after its listing, in the same thread (status reads its agents' states).
After = Callable[[ServerKey, ServerOutcome], None]
MAX_PARALLEL = 64  # threads mostly wait on their backend process; 64 covers the usual fleet in one wave


def listed_order(key: ServerKey) -> tuple[str, str, str]:
    """The order a document lists servers in (status, reconcile, restore): by host, this machine first, then
    by backend and server."""
    backend, server, host = key
    return host, backend, server


def query_server(plugins: Plugins, backend_name: str, server: str, ctx: CallContext,
                 host: str | None = None) -> ServerOutcome:
    """One server's outcome. Never raises: whatever goes wrong is `unknown`, with the reason. On another `host`
    the caller has entered its route (mam.calls.route.remote_route): the backend's calls go there, unknowing."""
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
    (mam.calls.batch), `expected` being how many servers of that host are asked. A host whose route cannot be built is
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
