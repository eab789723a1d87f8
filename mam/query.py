"""Asking servers for their agents: one listing call per server, all servers in parallel."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from mam.errors import MamError
from mam.model import CallContext, ErrorKind, Failure, ServerError, ServerOutcome, ServerState

if TYPE_CHECKING:
    from mam.plugins import Plugins

ServerKey = tuple[str, str]  # (backend, server)
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


def query_servers(plugins: Plugins, keys: Iterable[ServerKey], ctx: CallContext) -> dict[ServerKey, ServerOutcome]:
    """Query every server at once; each call has its own time limit, so a slow one delays no other.

    Plain threads pulling from one shared list: concurrent.futures would add start-up cost for nothing
    (bench/RESULTS.md).
    """
    keys = sorted(set(keys))
    if len(keys) <= 1:
        return {key: query_server(plugins, *key, ctx) for key in keys}
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
            results[key] = query_server(plugins, *key, ctx)  # never raises

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(MAX_PARALLEL, len(keys)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {key: results[key] for key in keys}
