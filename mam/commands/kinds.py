"""`mam kinds`: the agent kinds mam knows (mam/kinds/agents.yaml with the workspace's .mam/states.yaml laid
over it): the programs each is recognised by, how its session id is found and resumed, and its screen rules."""

from __future__ import annotations

from typing import Any

from mam.servers.app import App

# Deferred imports (inside functions), for start-up: the kind library loads only when the document is built.


def kinds_document(app: App) -> dict[str, Any]:
    """Every kind, by name. A bad .mam/states.yaml is refused (exit 2), as for every command that reads it."""
    from mam.kinds.library import RULE_STATES

    states_file = app.workspace.dot_mam / "states.yaml"
    library = app.kinds
    kinds = []
    for name in sorted(library.kinds):
        kind = library.kinds[name]
        rules = sorted(kind.rules, key=lambda r: RULE_STATES.index(r.state))  # in the order they are tried
        kinds.append({
            "name": name, "programs": list(kind.programs), "session_options": list(kind.session_options),
            "resume": None if kind.resume is None else list(kind.resume),
            "new_session": None if kind.new_session is None else list(kind.new_session),
            "rules": [{"id": r.id, "state": r.state} for r in rules],
        })
    return {"schema": 1, "states_file": str(states_file) if states_file.is_file() else None, "kinds": kinds}
