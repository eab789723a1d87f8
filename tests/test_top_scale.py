"""What `mam top` costs as the fleet grows (bench/top_idle.py measures it at 1,000 agents on 100 servers): the
registry is parsed once for all the servers of a refresh, and again only when its file changes."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from conftest import Workspace
from mam import registry
from mam.live.actions import Actions
from mam.live.topmodel import Pacer, Poller, ago, redraw_at
from mam.registry import text as registry_text
from mam.servers.app import App


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


async def _all_rows_read(app: Any, pilot: Any, rows: int = 300) -> None:
    """Until the view shows the fleet's `rows` and no server's call is out (30 s at most)."""
    from textual.widgets import DataTable

    for _ in range(600):
        if app.query_one(DataTable).row_count == rows and not app.poller.busy():
            return
        await pilot.pause(0.05)


def test_an_idle_view_asks_no_more_often_than_its_cost_allows() -> None:
    pacer = Pacer(base=1.0, most=8.0, factor=2.0)
    # A small fleet: a refresh costs 20 ms of CPU, the wait grows to 8 s as before.
    assert [pacer.next(False, 0.02) for _ in range(5)] == [2.0, 4.0, 8.0, 8.0, 8.0]
    # A large one: half a second a refresh, so the wait grows on, to 20 s (asking costs 2.5% of a core).
    assert [pacer.next(False, 0.5) for _ in range(3)] == [16.0, 20.0, 20.0]
    assert pacer.next(True, 0.5) == 1.0  # a change: quick again, whatever a refresh costs
    pacer.next(False, 0.5)
    pacer.reset()  # a key press
    assert pacer.interval == 1.0


def test_the_poller_counts_what_asking_cost_since_the_last_refresh() -> None:
    def fetch(group: tuple[str, str]) -> dict[str, Any]:
        ended = time.thread_time() + 0.05  # 50 ms of CPU per server
        while time.thread_time() < ended:
            pass
        return {"sessions": [], "servers": []}

    rows = [{"name": f"a{s}", "backend": "tmux", "server": f"s{s}", "host": "", "status": "running"}
            for s in range(4)]
    poller = Poller(lambda: rows, fetch, patience=30)
    _settle(poller)
    assert 0.2 <= poller.spent() < 1.0
    poller.refresh()  # a new refresh counts from zero
    assert poller.spent() < 0.2
    _settle(poller)


def test_the_poller_keeps_nothing_of_servers_and_agents_that_left_the_registry() -> None:
    def fetch(group: tuple[str, str]) -> dict[str, Any]:
        return {"sessions": [{"name": r["name"], "backend": "tmux", "server": r["server"], "host": None,
                              "status": "running", "live": "alive", "state": "idle", "state_source": "screen"}
                             for r in rows if r["server"] == group[0]],
                "servers": [{"backend": "tmux", "server": group[0], "host": None, "state": "up", "error": None}]}

    rows = [{"name": f"a{n}", "backend": "tmux", "server": f"s{n}", "host": "", "status": "running"}
            for n in range(50)]
    poller = Poller(lambda: rows, fetch, patience=30)
    _settle(poller)
    assert len(poller.snapshot()[0]) == 50
    rows = rows[:2]
    _settle(poller)
    assert len(poller.snapshot()[0]) == 2
    assert set(poller._asked) == {("s0", ""), ("s1", "")} and len(poller._since) == 2  # servers come and go


class Fleet:
    """The actions of `mam top` over 300 agents on 30 servers, answering at once, every agent idle."""

    def registered(self) -> list[dict[str, Any]]:
        return [{"name": f"s{s}-agent-{a}", "backend": "tmux", "server": f"s{s}", "host": "", "status": "running"}
                for s in range(30) for a in range(10)]

    def fetch(self, group: tuple[str, str]) -> dict[str, Any]:
        return {"sessions": [{"name": f"{group[0]}-agent-{a}", "backend": "tmux", "server": group[0], "host": None,
                              "status": "running", "live": "alive", "state": "idle", "state_source": "screen",
                              "state_age": 600, "evidence": {"rule": "claude.footer", "line": "? for shortcuts"}}
                             for a in range(10)],
                "servers": [{"backend": "tmux", "server": group[0], "host": None, "state": "up", "error": None}]}


def test_a_draw_with_nothing_new_makes_no_cell_and_no_line_again(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("textual")
    import asyncio

    from textual.widgets import DataTable, Static

    from mam.cli import topview

    app = topview.TopApp(Fleet(), interval=60)  # type: ignore[arg-type]
    made: list[str] = []
    updated: list[str] = []
    visible, update = topview.visible, Static.update

    def counted_visible(text: str) -> str:
        made.append(text)
        return visible(text)

    def counted_update(self: Static, *args: Any, **kwargs: Any) -> None:
        updated.append(str(self.id))
        update(self, *args, **kwargs)

    async def scenario() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await _all_rows_read(app, pilot)
            app.draw()
            monkeypatch.setattr(topview, "visible", counted_visible)
            monkeypatch.setattr(Static, "update", counted_update)
            app.draw()
            table = app.query_one(DataTable)
            cells = [str(cell) for cell in table.get_row_at(0)]
            assert table.row_count == 300 and cells[:7] + cells[8:] == [
                "s0-agent-0", "tmux", "s0", "local", "idle", "screen", "10m", "claude.footer"]

    asyncio.run(scenario())
    # Only the title and the server lines are made again (the title's "refreshed Ns ago" may have moved on);
    # the 2,700 cells of the rows, unchanged, are not; the empty server lines are not redrawn.
    assert len(made) <= 2 and "servers" not in updated


def test_an_idle_view_draws_the_table_when_an_age_turns_or_the_terminal_is_resized() -> None:
    pytest.importorskip("textual")
    import asyncio

    from textual.widgets import DataTable

    from mam.cli import topview

    app = topview.TopApp(Fleet(), interval=60)  # type: ignore[arg-type]
    app.poller.clock = lambda: time.time() - 3600  # every answer an hour old: its ages turn once an hour
    draws: list[float] = []
    draw = app.draw

    def counted() -> None:
        draws.append(time.monotonic())
        draw()

    app.draw = counted  # type: ignore[method-assign]

    async def scenario() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await _all_rows_read(app, pilot)
            await pilot.pause(0.5)
            settled = len(draws)
            await pilot.pause(2.5)
            assert len(draws) == settled  # nothing new, no age turning: the table is not drawn again
            assert "refreshed" in str(app.query_one("#title").render())  # the title alone counts the seconds
            await pilot.resize_terminal(80, 30)
            for _ in range(40):
                if [str(c.label) for c in app.query_one(DataTable).columns.values()] == [
                        "NAME", "SERVER", "STATE", "FOR", "WHY"]:
                    break
                await pilot.pause(0.05)
            assert [str(c.label) for c in app.query_one(DataTable).columns.values()] == [
                "NAME", "SERVER", "STATE", "FOR", "WHY"]

    asyncio.run(scenario())


def test_ages_are_drawn_when_they_turn_those_in_minutes_ten_at_a_time() -> None:
    now = 1000.0
    assert redraw_at([], now) == math.inf and redraw_at([None], now) == math.inf
    assert redraw_at([995.5], now) == 1001.0  # 4s turns to 5s at 1000.5: at most one draw a second
    assert redraw_at([998.2, 700.0], now + 0.6) == 1001.6  # 2s turns to 3s at 1001.2: the next second, then
    # 1m turns to 2m at 1003, 3m to 4m at 1008: both at the next ten-second mark, drawn together.
    assert redraw_at([883.0, 768.0], now) == 1010.0
    assert ago(883.0, 1010.0) == "2m" and ago(768.0, 1010.0) == "4m"
