"""`mam top` over a real tmux fleet, driven by Textual's headless driver (App.run_test and its Pilot) as a person
would drive it: the blocked agent comes first, `p`, `s`, `a`, `x`, `r` and `/` do what the CLI commands do,
and a hung server (its tmux server process stopped with SIGSTOP) never freezes the screen."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import Tmux, Workspace

pytest.importorskip("textual")

from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from mam.cli.topview import Pager, TopApp
from mam.live.actions import Actions
from mam.servers.app import App

STANDIN = str(Path(__file__).parent / "agents" / "standin.py")

def shots(tmp_path: Path) -> str:
    """Where the screenshots go: $MAM_TOP_SHOTS (docs/ when they are remade for the README), else the test's own
    folder."""
    return os.environ.get("MAM_TOP_SHOTS") or str(tmp_path)


def spawn(ws: Workspace, name: str, server: str, kind: str | None, *args: str) -> None:
    agent = ["--agent", kind] if kind else []
    proc = ws.mam("spawn", name, *agent, "--server", server, "--command", sys.executable, "--", STANDIN, *args)
    assert proc.returncode == 0, proc.stderr


def screen(tmux: Tmux, server: str, target: str) -> str:
    return tmux.run(server, "capture-pane", "-p", "-t", target).stdout


async def until(pilot: Pilot[Any], ok: Callable[[], bool], limit: float = 30) -> None:
    """Let the view run until `ok` holds (a stand-in draws its first screen after a moment; a refresh takes
    one); the test's own checks follow."""
    deadline = time.monotonic() + limit
    while not ok() and time.monotonic() < deadline:
        await pilot.pause(0.1)


def names(app: TopApp) -> list[str]:
    """The NAME column of the table as drawn, top to bottom."""
    table = app.query_one(DataTable)
    return [str(table.get_row_at(i)[0]) for i in range(table.row_count)]


def said(app: TopApp) -> str:
    return str(app.query_one("#said", Static).render())


def row(app: TopApp, name: str) -> Any:
    return next(r for r in app.rows if r.name == name)


async def select(pilot: Pilot[Any], app: TopApp, name: str) -> None:
    await until(pilot, lambda: name in names(app))
    app.query_one(DataTable).move_cursor(row=names(app).index(name), animate=False)
    await pilot.pause()


def status(ws: Workspace) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in ws.mam_json("status")["sessions"]}


def test_top_over_a_tmux_fleet(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    one, two, three = tmux.name(), tmux.name(), tmux.name()
    spawn(ws, "worker", one, "claude", "claude", "working")
    spawn(ws, "zasker", one, "codex", "codex", "blocked")  # last by name: first only because it is blocked
    spawn(ws, "idler", two, "gemini", "gemini", "idle")
    spawn(ws, "dead", two, "gemini", "gemini", "idle")
    spawn(ws, "sleepy", three, None, "generic", "garbage")
    tmux.run(two, "kill-session", "-t", "=dead")  # its row still says running: a dead agent to restore
    pid = int(tmux.run(three, "display-message", "-p", "#{pid}").stdout)
    app = TopApp(Actions(App.open(str(ws.root), None, ws.env)), interval=0.2, patience=1.0)
    stopped = False

    async def scenario() -> None:
        nonlocal stopped
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: any(r.name == "zasker" and r.state == "blocked" for r in app.rows)
                        and any(r.name == "idler" and r.state in ("idle", "done") for r in app.rows))
            # The one that needs a person first. The idler, freshly spawned, has done nothing: idle, not done, so
            # not sorted among the agents that need you.
            assert names(app)[0] == "zasker", names(app)
            assert row(app, "idler").state == "idle" and names(app)[1] != "idler", names(app)
            assert row(app, "dead").live == "absent"

            # `/` filters by server (or name, state, backend, host); empty shows all again.
            await pilot.press("slash", *two, "enter")
            await until(pilot, lambda: set(names(app)) == {"idler", "dead"})
            assert set(names(app)) == {"idler", "dead"}
            await pilot.press("slash", "ctrl+u", *"blocked", "enter")
            await until(pilot, lambda: names(app) == ["zasker"])
            assert names(app) == ["zasker"]
            await pilot.press("slash", "ctrl+u", "enter")
            await until(pilot, lambda: len(names(app)) == 5)

            # `p`: the last lines of its screen, as captured.
            await select(pilot, app, "zasker")
            await pilot.press("p")
            await until(pilot, lambda: isinstance(app.screen, Pager))
            assert isinstance(app.screen, Pager)
            assert "Would you like to run the following command?" in app.screen.lines, app.screen.lines
            assert "  $ npm run test:e2e" in app.screen.lines and "npm run test:e2e" in screen(tmux, one, "zasker")
            await pilot.press("escape")

            # `s` to the blocked one is refused, as `mam send` refuses it: its question would take the prompt.
            await pilot.press("s", *"hello", "enter")
            await until(pilot, lambda: "blocked" in said(app) and "sending" not in said(app))
            assert "nothing was sent" in said(app), said(app)
            # `a` answers it, as `mam send NAME --answer TEXT --enter`; `a` on another is refused.
            await pilot.press("a", "1", "enter")
            await until(pilot, lambda: "got: 1" in screen(tmux, one, "zasker"))
            assert "got: 1" in screen(tmux, one, "zasker")
            await select(pilot, app, "worker")
            await pilot.press("a")
            assert "not blocked" in said(app)

            # `s` sends a prompt to any live agent.
            await select(pilot, app, "idler")
            await pilot.press("s", *"hello top", "enter")
            await until(pilot, lambda: "got: hello top" in screen(tmux, two, "idler"))
            assert "got: hello top" in screen(tmux, two, "idler")

            # `x` stops only after a yes; `n` leaves it running.
            await select(pilot, app, "worker")
            await pilot.press("x", "n")
            assert said(app) == "worker left running"
            assert tmux.run(one, "has-session", "-t", "=worker", check=False).returncode == 0
            await pilot.press("x", "y")
            await until(pilot, lambda: tmux.run(one, "has-session", "-t", "=worker", check=False).returncode != 0)
            await until(pilot, lambda: row(app, "worker").status == "stopped")
            assert row(app, "worker").status == "stopped"

            # `r` restores the dead one from its launch spec, as `mam restore NAME`, after a yes.
            await select(pilot, app, "dead")
            await pilot.press("r", "y")  # after a yes
            await until(pilot, lambda: row(app, "dead").live == "alive" and "restoring" not in said(app))
            assert tmux.run(two, "has-session", "-t", "=dead", check=False).returncode == 0
            assert "restored" in said(app), said(app)

            # A hung server: its rows keep their last known state (sleepy's screen matches no rule: unknown),
            # stale, with when they were last seen; the screen keeps answering keys and the other servers' rows
            # keep coming.
            os.kill(pid, signal.SIGSTOP)
            stopped = True
            await until(pilot, lambda: row(app, "sleepy").stale)
            sleepy = row(app, "sleepy")
            assert sleepy.state == "unknown" and "not answering" in sleepy.why and "last seen" in sleepy.why
            assert any(line.server == three and "no answer" in line.reason for line in app.lines)
            app.draw()
            path = app.save_screenshot("top-160x48.svg", shots(tmp_path))
            assert "zasker" in Path(path).read_text()
            # At 80x24 the columns drop in the stated order; NAME, STATE and WHY stay.
            await pilot.resize_terminal(80, 24)
            await until(pilot, lambda: app.query_one(DataTable).columns.get("age") is None)
            headers = [str(c.label) for c in app.query_one(DataTable).columns.values()]
            assert headers == ["NAME", "SERVER", "STATE", "FOR", "WHY"], headers
            assert names(app)[0] == "zasker"
            path = app.save_screenshot("top-80x24.svg", shots(tmp_path))
            assert "zasker" in Path(path).read_text()
            await pilot.resize_terminal(160, 48)
            await pilot.press("slash", *"sleepy", "enter")
            await until(pilot, lambda: names(app) == ["sleepy"])
            assert names(app) == ["sleepy"]
            await pilot.press("slash", "ctrl+u", "enter")
            await select(pilot, app, "idler")
            await pilot.press("s", *"still here", "enter")
            await until(pilot, lambda: "got: still here" in screen(tmux, two, "idler"))
            assert "got: still here" in screen(tmux, two, "idler")
            # Still hung while the rest went on: not answering, or answered `unknown` when its call timed out.
            assert row(app, "sleepy").state == "unknown" and "last seen" in row(app, "sleepy").why
            assert any(line.server == three and line.state == "unknown" for line in app.lines)
            os.kill(pid, signal.SIGCONT)
            stopped = False
            await until(pilot, lambda: not row(app, "sleepy").stale)
            assert row(app, "sleepy").state == "unknown" and not row(app, "sleepy").stale

    try:
        asyncio.run(scenario())
    finally:
        if stopped:
            os.kill(pid, signal.SIGCONT)
    # What top did is what the CLI shows.
    after = status(ws)
    assert after["worker"]["status"] == "stopped" and after["dead"]["live"] == "alive"
