"""The `mam top` view over stand-in actions (no servers): `?` lists the keys, an action's error is said on the
bottom line without ending the view, and `NO_COLOR` drops every colour."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

pytest.importorskip("textual")

from textual.widgets import DataTable, Static

from mam.cli.topview import Pager, TopApp
from mam.live.topmodel import TopRow
from mam.util.errors import MamError


class Stand:
    """The actions `mam top` takes, answering at once from a fixed fleet."""

    def registered(self) -> list[dict[str, Any]]:
        return [{"name": n, "backend": "tmux", "server": "team", "host": "", "status": "running"}
                for n in ("asker", "writer")]

    def fetch(self, group: tuple[str, str]) -> dict[str, Any]:
        def session(name: str, state: str) -> dict[str, Any]:
            return {"name": name, "backend": "tmux", "server": "team", "host": None, "status": "running",
                    "live": "alive", "state": state, "state_source": "screen",
                    "evidence": {"rule": f"codex.{state}", "line": "x"}}

        return {"sessions": [session("writer", "working"), session("asker", "blocked")],
                "servers": [{"backend": "tmux", "server": "team", "host": None, "state": "up", "error": None}]}

    def stop(self, row: TopRow) -> str:
        raise MamError("operation_failed", f"could not stop {row.name}: tmux said no")


def run(app: TopApp, steps: Any) -> None:
    async def scenario() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            for _ in range(600):  # a busy machine may take a while to run the first refresh's threads
                if app.query_one(DataTable).row_count == 2:
                    break
                await pilot.pause(0.05)
            await steps(pilot)

    asyncio.run(scenario())


def said(app: TopApp) -> str:
    return str(app.query_one("#said", Static).render())


def test_keys_list_and_an_error_is_said_not_fatal() -> None:
    app = TopApp(Stand(), interval=0.2)  # type: ignore[arg-type]

    async def steps(pilot: Any) -> None:
        await pilot.press("question_mark")
        assert isinstance(app.screen, Pager)
        text = "\n".join(app.screen.lines)
        for key in ("Enter", "p", "s", "a", "x", "r", "/", "?"):
            assert f"{key:>6}  " in text
        await pilot.press("escape")
        assert not isinstance(app.screen, Pager)
        await pilot.press("x", "y")  # the cursor is on asker, first because blocked
        for _ in range(600):
            if "tmux said no" in said(app):
                break
            await pilot.pause(0.05)
        assert said(app) == "stop asker: could not stop asker: tmux said no"
        assert app.query_one(DataTable).row_count == 2  # the view goes on

    run(app, steps)


def test_no_color_drops_the_colours(monkeypatch: pytest.MonkeyPatch) -> None:
    shots = {}
    for no_color in (False, True):
        if no_color:
            monkeypatch.setenv("NO_COLOR", "1")
        else:
            monkeypatch.delenv("NO_COLOR", raising=False)
        app = TopApp(Stand(), interval=0.2)  # type: ignore[arg-type]

        async def steps(pilot: Any, app: TopApp = app, no_color: bool = no_color) -> None:
            for _ in range(600):  # the table as drawn, not a fixed pause: a loaded machine draws late
                shots[no_color] = app.export_screenshot()
                if "asker" in shots[no_color] and "writer" in shots[no_color]:
                    break
                await pilot.pause(0.05)

        run(app, steps)
    # Colours without it (the blocked state in red, the selected row's blue); only greys with it.
    assert colours(shots[False]) - greys(shots[False])
    assert colours(shots[True]) == greys(shots[True]) and "asker" in shots[True]


def colours(svg: str) -> set[str]:
    return {c.lower() for c in re.findall(r"(?:fill|color):\s*(#[0-9a-fA-F]{6})", svg)}


def greys(svg: str) -> set[str]:
    """The colours of `svg` whose red, green and blue are (nearly) equal."""
    found = set()
    for c in colours(svg):
        r, g, b = (int(c[i:i + 2], 16) for i in (1, 3, 5))
        if max(r, g, b) - min(r, g, b) <= 8:
            found.add(c)
    return found


def test_enter_hands_the_terminal_to_the_attach_client_and_comes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib

    from mam.cli import topview

    ran: list[tuple[str, list[str]]] = []

    class Attaching(Stand):
        def attach_command(self, row: TopRow) -> tuple[str, list[str], dict[str, str]]:
            return ("/usr/bin/tmux", ["tmux", "-L", row.server, "attach-session", "-t", f"={row.name}"], {})

    def attach(program: str, argv: list[str], env: dict[str, str]) -> int:
        ran.append((program, argv))
        return 0

    monkeypatch.setattr(topview, "attach", attach)
    app = TopApp(Attaching(), interval=0.2)  # type: ignore[arg-type]
    monkeypatch.setattr(app, "suspend", contextlib.nullcontext)  # the headless driver has no terminal to give

    async def steps(pilot: Any) -> None:
        await pilot.press("down", "enter")  # writer: second, below the blocked asker
        for _ in range(600):
            if "detached" in said(app):
                break
            await pilot.pause(0.05)
        assert ran == [("/usr/bin/tmux", ["tmux", "-L", "team", "attach-session", "-t", "=writer"])]
        assert said(app) == "attach writer: detached (exit 0)"

    run(app, steps)


class Turning(Stand):
    """The fleet again, where the writer finishes its turn (working, then done) from the third reading on; the
    asker is blocked from the first, which is where top starts, not a change."""

    def __init__(self, env: dict[str, str]) -> None:
        import types

        self.app = types.SimpleNamespace(env=env)
        self.readings = 0

    def fetch(self, group: tuple[str, str]) -> dict[str, Any]:
        self.readings += 1
        doc = super().fetch(group)
        if self.readings >= 3:
            doc["sessions"][0] = {**doc["sessions"][0], "state": "done", "evidence": {"rule": "codex.done",
                                                                                     "line": "\x1b]0;$(id)\x07"}}
        return doc


def test_notify_and_exec_tell_each_change_once_never_the_baseline(tmp_path: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import os
    import sys

    told = tmp_path / "told.jsonl"
    command = [sys.executable, "-c", f"import sys; open({str(told)!r}, 'a').write(sys.stdin.read()); "
                                     "print('anything it prints never reaches the screen')"]
    bells: list[int] = []
    monkeypatch.setattr(TopApp, "bell", lambda self: bells.append(1))
    # No notify-send on PATH: --notify rings the view's own bell.
    env = {**os.environ, "PATH": str(tmp_path)}
    app = TopApp(Turning(env), interval=0.2, notify=True, command=command)  # type: ignore[arg-type]

    async def steps(pilot: Any) -> None:
        for _ in range(400):
            if told.exists() and bells:
                break
            await pilot.pause(0.05)
        await pilot.pause(1.0)  # more readings: still the one change
        assert "writer" in said(app) and "working -> done" in said(app)

    run(app, steps)
    changes = [json.loads(line) for line in told.read_text().splitlines()]
    assert [(c["name"], c["from"], c["to"]) for c in changes] == [("writer", "working", "done")]
    assert changes[0]["evidence"]["line"] == "\x1b]0;$(id)\x07"  # data on stdin, as mam watch gives it
    assert bells == [1]


async def until(pilot: Any, condition: Any, deadline: float = 30.0) -> None:
    """Wait, a little at a time, until `condition()` holds (a loaded machine may take seconds); fail after
    `deadline` seconds."""
    import time

    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, "the view never got there"
        await pilot.pause(0.05)


class Bots(Stand):
    """fixer blocked (first), bot1 and bot2 working."""

    names = ("fixer", "bot1", "bot2")

    def registered(self) -> list[dict[str, Any]]:
        return [{"name": n, "backend": "tmux", "server": "team", "host": "", "status": "running"} for n in self.names]

    def fetch(self, group: tuple[str, str]) -> dict[str, Any]:
        return {"sessions": [{"name": n, "backend": "tmux", "server": "team", "host": None, "status": "running",
                              "live": "alive", "state": "blocked" if n == "fixer" else "working",
                              "state_source": "screen", "evidence": None} for n in self.names],
                "servers": [{"backend": "tmux", "server": "team", "host": None, "state": "up", "error": None}]}


def test_the_selection_follows_the_agent_through_the_filter_and_keys_name_it() -> None:
    from mam.cli.topview import Ask, Confirm

    app = TopApp(Bots(), interval=0.2)  # type: ignore[arg-type]
    table = app.query_one

    async def steps(pilot: Any) -> None:
        await until(pilot, lambda: table(DataTable).row_count == 3)
        await pilot.press("slash", *"bot", "enter")
        await until(pilot, lambda: table(DataTable).row_count == 2)
        await pilot.press("down")
        await until(pilot, lambda: app.selected() is not None and app.selected()[3] == "bot2")  # type: ignore[index]
        await pilot.press("slash")
        await until(pilot, lambda: isinstance(app.screen, Ask))
        await pilot.press("ctrl+u", "backspace", "backspace", "backspace", "enter")
        await until(pilot, lambda: table(DataTable).row_count == 3)
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, Confirm))
        assert app.screen.question == "stop bot2 on tmux server team?"
        await pilot.press("n")
        await until(pilot, lambda: said(app) == "bot2 left running")
        await pilot.press("r")  # restore asks too, by name
        await until(pilot, lambda: isinstance(app.screen, Confirm))
        assert app.screen.question == "restore bot2 on tmux server team?"
        await pilot.press("n")
        await until(pilot, lambda: said(app) == "bot2 not restored")

    run3(app, steps)


def run3(app: TopApp, steps: Any) -> None:
    async def scenario() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await steps(pilot)

    asyncio.run(scenario())


class Asking(Stand):
    """asker is blocked on a question its screen shows with the lines around it."""

    screen = ["$ codex", "I will edit main.py to fix the KeyError.", "", "Allow edit to main.py?",
              "  1. Yes", "  2. No, tell codex what to do", "", "esc to cancel"]

    def fetch(self, group: tuple[str, str]) -> dict[str, Any]:
        doc = super().fetch(group)
        doc["sessions"][1]["evidence"] = {"rule": "codex.blocked", "line": "Allow edit to main.py?"}
        return doc

    def peek(self, row: TopRow, lines: int = 40) -> list[str]:
        return self.screen

    def answer(self, row: TopRow, text: str) -> str:
        return f"sent {text!r} to {row.name}"


def test_the_answer_box_shows_the_question_messages_expire_and_the_keys_say_escape_closes() -> None:
    from mam.cli.topview import Ask

    app = TopApp(Asking(), interval=0.2)  # type: ignore[arg-type]
    app.say_for = 1.0
    told: list[str] = []
    say = app.say

    def recording(text: str) -> None:  # a loaded machine may look only after the message expired
        told.append(text)
        say(text)

    app.say = recording  # type: ignore[method-assign]

    def title() -> str:
        return str(app.screen.query_one("#ask-title", Static).render()) if isinstance(app.screen, Ask) else ""

    async def steps(pilot: Any) -> None:
        await pilot.press("a")  # the cursor is on asker, first because blocked
        await until(pilot, lambda: "1. Yes" in title())
        lines = title().splitlines()
        assert lines[0] == "answer asker (codex.blocked; Enter submits, Escape cancels):"
        assert "> Allow edit to main.py?" in lines and "  I will edit main.py to fix the KeyError." in lines
        assert "    2. No, tell codex what to do" in lines
        await pilot.press("1", "enter")
        await until(pilot, lambda: "answer asker: sent '1' to asker" in told)
        await until(pilot, lambda: said(app) == "? keys  q quit")  # the message expired
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, Pager))
        assert "Escape" in app.screen.title_text and any("Escape" in line for line in app.screen.lines)

    run(app, steps)


class Ended(Stand):
    """asker and writer live on team; fixer stopped there, old failed on a server that is gone."""

    def registered(self) -> list[dict[str, Any]]:
        return [*super().registered(),
                {"name": "fixer", "backend": "tmux", "server": "team", "host": "", "status": "stopped"},
                {"name": "old", "backend": "tmux", "server": "gone", "host": "", "status": "terminated",
                 "exit_status": 3, "last_output": ["KeyError: 'path'"]}]

    def fetch(self, group: tuple[str, str]) -> dict[str, Any]:
        assert group[0] == "team", "a server of only ended agents is asked"
        return super().fetch(group)


def test_ended_agents_are_a_dim_group_below_and_e_hides_them() -> None:
    app = TopApp(Ended(), interval=0.2)  # type: ignore[arg-type]

    def names() -> list[str]:
        table = app.query_one(DataTable)
        return [str(table.get_row_at(i)[0]) for i in range(table.row_count)]

    async def steps(pilot: Any) -> None:
        await until(pilot, lambda: app.query_one(DataTable).row_count == 4)
        assert names() == ["asker", "writer", "fixer", "old"]
        table = app.query_one(DataTable)
        why = [str(table.get_row_at(i)[-1]) for i in range(4)]
        assert why[3] == "exited 3: KeyError: 'path'" and why[2] == "stopped"
        assert table.get_row_at(3)[0].style == "dim" and table.get_row_at(0)[0].style != "dim"
        assert str(app.query_one("#servers", Static).render()) == ""  # no line for the server that is gone
        await pilot.press("e")
        await until(pilot, lambda: names() == ["asker", "writer"])
        assert "2 ended hidden" in str(app.query_one("#title", Static).render())
        await pilot.press("e")
        await until(pilot, lambda: names() == ["asker", "writer", "fixer", "old"])

    run3(app, steps)
