"""The documents of `ls`, `bootstrap`, `backends` and `env`: backend-agnostic, through the hooks."""

from __future__ import annotations

import shutil
from typing import Any

from mam.audit.trail import audited
from mam.plugin.records import OPERATIONS, ServerOutcome, ServerState, implemented_operations, missing_methods
from mam.servers.app import App
from mam.servers.availability import require_binary
from mam.servers.bootstrap import start_server
from mam.servers.fanout import call_context, outcomes_for
from mam.servers.hosts import chosen_host
from mam.util.errors import MamError
from mam.util.names import check_name


def ls_document(app: App, server: str, host: str | None = None) -> tuple[dict[str, Any], ServerOutcome]:
    check_name(server, "server name")
    there = chosen_host(app, host)
    app.plugins.backend(app.backend_name)
    outcome = outcomes_for(app, {(app.backend_name, server, there)})[(app.backend_name, server, there)]
    require_binary(app, outcome.error.kind if outcome.error else None, "mam ls needs it")
    doc: dict[str, Any] = {"schema": 1, "server": outcome.as_json(), "agents": [a.as_json() for a in outcome.agents]}
    work = _worktrees_listed(app, server, there, {a.name for a in outcome.agents if a.name})
    if work:
        doc["worktrees"] = work
    return doc, outcome


def _worktrees_listed(app: App, server: str, host: str, names: set[str]) -> dict[str, dict[str, Any]]:
    """The work of the worktrees of the registered agents this listing shows (as `mam status` reads it: one git
    call each, in parallel); none when the registry cannot be read, which `ls` does not need."""
    try:
        reg = app.load_registry()
    except MamError:
        return {}
    rows = [r for r in reg.rows if r.backend == app.backend_name and r.server == server
            and (r.host or "") == host and r.name in names
            and r.spec is not None and isinstance(r.spec.get("worktree"), dict)]
    if not rows:
        return {}
    from mam.agents.worktrees import read_states  # start-up: git only when a listed agent has a worktree

    found = read_states(app, rows)()
    return {r.name: found[r.key] for r in rows if r.key in found}


@audited("bootstrap", agent=lambda bound: None)
def bootstrap_document(app: App, server: str, host: str | None = None) -> dict[str, Any]:
    check_name(server, "server name")
    there = chosen_host(app, host)
    result, log_path = start_server(app, server, there or None)
    plan = app.server_plan
    return {"schema": 1, "backend": app.backend_name, "server": server, "host": there or None,
            "state": ServerState.UP.value,
            "started": result.started, "pid": result.pid, "log": str(log_path) if result.started else None,
            "removed_env": [d.name for d in plan.removed], "message": result.message}


def backends_document(app: App) -> dict[str, Any]:
    plugins = app.plugins
    specs = plugins.specs()
    ctx = call_context(app)
    entries: list[dict[str, Any]] = []
    for spec in specs:
        path = shutil.which(spec.executable, path=app.backend_env.get("PATH")) if spec.executable else None
        version, error, supported = None, None, None
        declared = spec.operations
        missing: list[str] = []
        try:
            backend = plugins.backend(spec.name)
            missing = missing_methods(backend)
            if declared is None:  # undeclared: whichever its object has a method for, as the kit reads it
                declared = implemented_operations(backend)
            version = backend.version(ctx) if path else None
            # the backend's optional `supported(version)`: whether mam is tested against that release
            check = getattr(backend, "supported", None)
            supported = bool(check(version)) if check is not None and version is not None else None
        except MamError as exc:
            error = exc.message
        entries.append({"name": spec.name, "provider": spec.provider, "description": spec.description,
                        "executable": spec.executable, "binary": path, "found": path is not None,
                        "version": version, "supported": supported, "default": spec.name == app.backend_name,
                        "error": error, "operations": [op for op in OPERATIONS if op in (declared or ())],
                        "left_out": [op for op in OPERATIONS if op not in (declared or ())] + missing})
    for problem in plugins.problems:
        entries.append({"name": problem.plugin, "provider": problem.provider, "description": None,
                        "executable": None, "binary": None, "found": False, "version": None, "supported": None,
                        "default": False, "error": problem.error, "operations": [], "left_out": []})
    hooked = [{"name": p.name, "provider": p.provider, "hooks": list(p.hooks)} for p in plugins.hook_plugins()]
    return {"schema": 1, "backends": entries, "plugins": hooked}


def env_document(app: App) -> dict[str, Any]:
    plan = app.server_plan
    return {
        "schema": 1,
        "workspace": str(app.workspace.root),
        "removed": [{"name": d.name, "rule": d.rule.pattern, "source": d.rule.source,
                     "not_kept_by": d.refused_keep.pattern if d.refused_keep else None,
                     "not_kept_source": d.refused_keep.source if d.refused_keep else None} for d in plan.removed],
        "kept": [{"name": d.name, "rule": d.rule.pattern, "source": d.rule.source, "kept_by": d.kept_by.pattern,
                  "kept_source": d.kept_by.source} for d in plan.kept if d.kept_by is not None],
        "variables": len(plan.env),
    }


