"""`mam worktree remove`, `list` and `prune`: the git worktrees mam made for its agents (mam spawn --worktree).

The decisions are mam.agents.worktrees': a worktree is removed only when nothing would be lost, and only one that
git lists as a worktree of the recorded repository and that a row this user's mam signed says mam made.
"""

from __future__ import annotations

from typing import Any

from mam.agents import worktrees
from mam.agents.rows import agent_row, rows_on, snapshot, unchanged_rows
from mam.audit.trail import Entry, audited
from mam.calls.route import remote_route
from mam.registry import Row
from mam.servers.app import App


def _each_removed(doc: dict[str, Any]) -> list[Entry]:
    """The audit trail's line: removed (saved first to a branch with --force), or refused as work would be lost."""
    if doc["removed"]:
        saved = f"; saved to {doc['saved_to']}" if doc.get("saved_to") else ""
        return [(doc["name"], "ok", ("already gone" if doc.get("already_gone") else "removed") + saved)]
    return [(doc["name"], "refused", "not removed: work would be lost")]


@audited("worktree remove", unless="dry_run", each=_each_removed)
def remove_document(app: App, name: str, server: str | None = None, host: str | None = None, *, force: bool = False,
                    delete_branch: bool = False, dry_run: bool = False) -> dict[str, Any]:
    """Remove NAME's worktree (and its branch, with `delete_branch`) when nothing would be lost; else the
    document says what would be, and `removed` is false (exit 1). `dry_run`: `removed` says whether it would be,
    and nothing is touched (forget --remove-worktree --dry-run)."""
    row = agent_row(app, name, server, host)
    record, removal = worktrees.remove_for_row(app, row, force=force, delete_branch=delete_branch, dry_run=dry_run)
    return {"schema": 1, "name": row.name, "backend": row.backend, "server": row.server, "host": row.host,
            "worktree": record, **removal.as_json()}


def list_document(app: App) -> dict[str, Any]:
    """Every worktree the rows record, with its agent and the state of its work (one git call each, in parallel;
    `unknown` when it cannot be read)."""
    rows = [r for r in rows_on(app, app.load_registry(), None, None)
            if r.spec is not None and isinstance(r.spec.get("worktree"), dict)]
    states = worktrees.read_states(app, rows)()
    entries = []
    for row in rows:
        record = row.spec["worktree"] if row.spec else {}
        entries.append({"name": row.name, "backend": row.backend, "server": row.server, "host": row.host,
                        "status": row.status, "path": record.get("path"), "base": record.get("base"),
                        "made_by_mam": record.get("made_by_mam"), **states[row.key]})
    return {"schema": 1, "worktrees": entries}


def _each_pruned(doc: dict[str, Any]) -> list[Entry]:
    """The audit trail's line per worktree record: dropped, or left (refused) with the reason."""
    return [(w["name"], "ok" if w["pruned"] else "refused", "record dropped" if w["pruned"] else str(w["reason"]))
            for w in doc["pruned"]]


@audited("worktree prune", agent=lambda bound: None, unless="dry_run", each=_each_pruned)
def prune_document(app: App, dry_run: bool = False) -> dict[str, Any]:
    """Drop the worktree records of rows whose folder is gone (git's own record too: `git worktree prune`),
    re-signing the spec mam signed; a row whose spec is not signed is left as it is."""
    listing = list_document(app)["worktrees"]
    gone = {(e["backend"], e["server"], e["name"], e["host"] or "") for e in listing if e["state"] == "gone"}
    reg = app.load_registry()
    chosen = [r for r in reg.rows if r.key in gone]
    pruned: list[dict[str, Any]] = []
    from mam.agents.restoreplan import SpecTrust  # start-up: signatures only here

    trust = SpecTrust(app.env)
    signed = [r for r in chosen if r.spec is not None and trust.verdict(r, r.spec) == "signed"]
    if not dry_run and signed:
        seen = {r.key: snapshot(r) for r in signed}

        def change(document: dict[str, Any], fresh: tuple[Row, ...]) -> bool:
            for row in unchanged_rows(fresh, seen):
                spec = {k: v for k, v in (row.spec or {}).items() if k != "worktree"}
                row.raw["spec"] = spec
                row.raw["spec_sig"] = trust.signature(row, spec)
            return True

        app.update_registry(change)
        for row in signed:
            record = (row.spec or {}).get("worktree") or {}
            with remote_route(app.route(row.host or "")):
                worktrees.prune_repository(str(record.get("repo")), app.timeout, app.backend_env)
    for row in chosen:
        record = (row.spec or {}).get("worktree") or {}
        pruned.append({"name": row.name, "backend": row.backend, "server": row.server, "host": row.host,
                       "path": record.get("path"), "branch": record.get("branch"),
                       "pruned": row in signed, "reason": None if row in signed else "its spec is not signed by "
                       "your mam: left as it is"})
    return {"schema": 1, "dry_run": dry_run, "pruned": pruned}
