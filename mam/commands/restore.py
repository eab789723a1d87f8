"""`mam restore`: start registered agents again after their server died, from the launch spec their row keeps
(docs/cli.md, docs/json.md); the plan and its steps are mam/agents/restoreplan.py's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mam.agents.restoreplan import SpecTrust, consent, plan_summary, restore_plan, run_plan
from mam.audit.trail import OUTCOMES, Entry, audited
from mam.servers.app import App
from mam.servers.fanout import listed_order


def _each_restored(doc: dict[str, Any]) -> list[Entry]:
    """The audit trail's line per agent of the plan."""
    return [(a["name"], OUTCOMES.get(a["outcome"], "failed"), f"{a['outcome']}: {a['message']}")
            for a in doc["agents"]]


@audited("restore", agent=lambda bound: ",".join(bound.get("names") or []) or None, unless="dry_run",
         each=_each_restored)
def restore_document(app: App, names: list[str], all_rows: bool = False, dry_run: bool = False,
                     progress: bool = False, server: str | None = None, host: str | None = None,
                     trust_spec: bool = False, ask: Callable[[dict[str, Any]], bool] | None = None
                     ) -> dict[str, Any]:
    """`trust_spec`: run the specs this user's mam did not sign too (and sign them); `ask`: asks the user about
    each such spec, seeing its entry (never in a dry run)."""
    trust = SpecTrust(app.env)
    steps, outcomes = restore_plan(app, names, all_rows, server, host, trust)
    consent(steps, trust_spec, None if dry_run else ask)
    if not dry_run:
        run_plan(app, steps, progress, trust)
    return {"schema": 1, "workspace": str(app.workspace.root), "registry": str(app.workspace.registry_path),
            "backend": app.explicit_backend, "dry_run": dry_run,
            "servers": [outcomes[k].as_json() for k in sorted(outcomes, key=listed_order)],
            "agents": [s.as_json() for s in steps], "counts": plan_summary(steps)}
