"""What `mam top` costs as the fleet grows (bench/top_idle.py measures it at 1,000 agents on 100 servers): the
registry is parsed once for all the servers of a refresh, and again only when its file changes."""

from __future__ import annotations

import time
from typing import Any

import pytest

from conftest import Workspace
from mam import registry
from mam.app import App
from mam.cli.topactions import Actions
from mam.registry import text as registry_text
from mam.topmodel import Poller


def _rows(servers: int, agents: int) -> list[dict[str, Any]]:
    return [{"name": f"s{s}-agent-{a}", "backend": "tmux", "server": f"scale-{s}", "status": "running"}
            for s in range(servers) for a in range(agents)]


def _settle(poller: Poller) -> None:
    poller.refresh()
    deadline = time.monotonic() + 30
    while poller.busy() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not poller.busy()


def test_a_refresh_parses_the_registry_once_and_again_only_when_it_changes(ws: Workspace,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    ws.write_registry(registry_text.dump({"version": 1, "sessions": _rows(4, 3)}))
    parsed = []
    load = registry.load

    def counted(*args: Any) -> Any:
        parsed.append(args)
        return load(*args)

    monkeypatch.setattr(registry, "load", counted)
    actions = Actions(App.open(str(ws.root), "tmux", ws.env))
    poller = Poller(actions.registered, actions.fetch, patience=30)
    _settle(poller)
    rows, lines = poller.snapshot()
    assert len(rows) == 12 and {line.server for line in lines} == {f"scale-{s}" for s in range(4)}  # none is up
    assert len(parsed) == 1  # the listing of the rows and the four servers' calls share one parse
    _settle(poller)
    assert len(parsed) == 1  # nothing changed: nothing parsed

    ws.write_registry(registry_text.dump({"version": 1, "sessions": _rows(4, 3) + _rows(5, 1)[-1:]}))
    _settle(poller)
    assert len(parsed) == 2
    rows, _ = poller.snapshot()
    assert "s4-agent-0" in {row.name for row in rows} and len(rows) == 13

