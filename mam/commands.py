"""The documents of `ls`, `bootstrap`, `backends` and `env`: backend-agnostic, through the hooks."""

from __future__ import annotations

import copy
import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mam.app import App
from mam.errors import MamError
from mam.model import BootstrapContext, BootstrapResult, ErrorKind, ServerOutcome, ServerState
from mam.names import check_name
from mam.query import query_server
from mam.registry import Registry, Row, RowKey
from mam.safefile import lock_within, open_unfollowed
from mam.status import call_context


def require_binary(app: App, outcome_error_kind: ErrorKind | None, what: str, backend: str | None = None) -> None:
    if outcome_error_kind is ErrorKind.NOT_INSTALLED:
        spec = app.plugins.spec(backend or app.backend_name)
        raise MamError("backend_unavailable", f"{spec.executable or spec.name}: not found on PATH; {what}",
                       hint=f"install {spec.executable or spec.name}, or choose another backend with --backend")


def ls_document(app: App, server: str) -> tuple[dict[str, Any], ServerOutcome]:
    check_name(server, "server name")
    app.plugins.backend(app.backend_name)
    outcome = query_server(app.plugins, app.backend_name, server, call_context(app))
    require_binary(app, outcome.error.kind if outcome.error else None, "mam ls needs it")
    return ({"schema": 1, "server": outcome.as_json(), "agents": [a.as_json() for a in outcome.agents]}, outcome)


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


def bootstrap_document(app: App, server: str) -> dict[str, Any]:
    check_name(server, "server name")
    result, log_path = start_server(app, server)
    plan = app.server_plan
    return {"schema": 1, "backend": app.backend_name, "server": server, "state": ServerState.UP.value,
            "started": result.started, "pid": result.pid, "log": str(log_path) if result.started else None,
            "removed_env": [d.name for d in plan.removed], "message": result.message}


def backends_document(app: App) -> dict[str, Any]:
    plugins = app.plugins
    specs = plugins.specs()
    ctx = call_context(app)
    entries: list[dict[str, Any]] = []
    for spec in specs:
        path = shutil.which(spec.executable, path=app.backend_env.get("PATH")) if spec.executable else None
        version, error = None, None
        try:
            backend = plugins.backend(spec.name)
            version = backend.version(ctx) if path else None
        except MamError as exc:
            error = exc.message
        entries.append({"name": spec.name, "provider": spec.provider, "description": spec.description,
                        "executable": spec.executable, "binary": path, "found": path is not None,
                        "version": version, "default": spec.name == app.backend_name, "error": error})
    for problem in plugins.problems:
        entries.append({"name": problem.plugin, "provider": problem.provider, "description": None,
                        "executable": None, "binary": None, "found": False, "version": None, "default": False,
                        "error": problem.error})
    return {"schema": 1, "backends": entries}


def env_document(app: App) -> dict[str, Any]:
    plan = app.server_plan
    return {
        "schema": 1,
        "workspace": str(app.workspace.root),
        "removed": [{"name": d.name, "rule": d.rule.pattern, "source": d.rule.source} for d in plan.removed],
        "kept": [{"name": d.name, "rule": d.rule.pattern, "source": d.rule.source, "kept_by": d.kept_by.pattern,
                  "kept_source": d.kept_by.source} for d in plan.kept if d.kept_by is not None],
        "variables": len(plan.env),
    }


def rows_named(app: App, reg: Registry, name: str, server: str | None) -> list[Row]:
    """The rows a command about agent `name` means: of the backend chosen explicitly (--backend,
    $MAM_BACKEND), else of any backend, since the row itself says which; on `server` when given. More than one
    is refused, saying what to add."""
    explicit = app.explicit_backend
    rows = [r for r in reg.rows if r.name == name and (explicit is None or r.backend == explicit)
            and (server is None or r.server == server)]
    if len(rows) > 1:
        where = ", ".join(sorted(f"{r.backend} server {r.server}" for r in rows))
        several_backends = len({r.backend for r in rows}) > 1
        raise MamError("usage", f"{name} is registered on several servers ({where})",
                       hint="pass --backend NAME and --server NAME" if several_backends else "pass --server NAME")
    return rows


def snapshot(row: Row) -> dict[str, Any]:
    """The row as it was read, for `unchanged_rows` to compare the re-read registry against."""
    return copy.deepcopy(row.raw)


def unchanged_rows(rows: tuple[Row, ...], seen: Mapping[RowKey, Mapping[str, Any]]) -> list[Row]:
    """Those of the freshly re-read `rows` (under the registry lock) that are still exactly as `seen` (their
    snapshots, by key): a row another command rewrote meanwhile (a re-spawn, a stop, a reconcile, a hand edit)
    is theirs, and a write planned on the old one leaves it alone."""
    return [row for row in rows if row.key in seen and row.raw == seen[row.key]]
