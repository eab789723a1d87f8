"""`mam top`'s `n`: a new agent from the view, through `mam spawn`'s own code (issue 33, point 8). A form asks
its name, kind or command, server and directory (the workspace root unless changed); the agent it starts is in
the registry and in the table. A launch spec holding the workspace's words is asked about as the CLI asks at a
terminal (its argv shown, y/N): no refuses with the CLI's message and starts nothing, y runs it. Driven with
Textual's pilot over a real tmux server, and once as a person would: `mam top` in a real terminal (a tmux pane),
keys typed into it."""

from __future__ import annotations

import asyncio
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from conftest import Tmux, Workspace

pytest.importorskip("textual")

from test_top_tmux import names, said, until
from textual.widgets import Input, Static

from mam.cli.topspawn import Consent, SpawnForm
from mam.cli.topview import Pager, TopApp
from mam.live.actions import Actions
from mam.servers.app import App

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def rows(ws: Workspace) -> dict[str, dict[str, Any]]:
    if not ws.registry.exists():
        return {}
    return {r["name"]: r for r in yaml.safe_load(ws.registry.read_text())["sessions"]}


async def open_form(pilot: Any, app: TopApp) -> SpawnForm:
    await pilot.press("n")
    await until(pilot, lambda: isinstance(app.screen, SpawnForm))
    assert isinstance(app.screen, SpawnForm)
    return app.screen


async def fill(pilot: Any, form: SpawnForm, **fields: str) -> None:
    for key, value in fields.items():
        form.query_one(f"#spawn-{key}", Input).value = value
    await pilot.press("enter")


@needs_tmux
def test_n_asks_name_kind_or_command_server_and_directory_and_spawns_it(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    assert ws.mam("spawn", "first", "--server", server, "--command", "sleep 600").returncode == 0
    app = TopApp(Actions(App.open(str(ws.root), None, ws.env), [server]), interval=0.2)
    (ws.root / "sub").mkdir()

    async def scenario() -> None:
        async with app.run_test(size=(120, 30)) as pilot:
            await until(pilot, lambda: "first" in names(app))
            await pilot.press("question_mark")  # the keys' list names it
            await until(pilot, lambda: isinstance(app.screen, Pager))
            assert isinstance(app.screen, Pager) and any(line.split()[0] == "n" and "spawn" in line
                                                         for line in app.screen.lines)
            await pilot.press("escape")
            form = await open_form(pilot, app)
            # the server and the directory are filled in: the view's server, the workspace root
            assert form.values() == {"name": "", "agent": "", "command": "", "server": server, "cwd": str(ws.root)}
            await pilot.press("enter")  # nothing typed: the form says what it needs, and stays
            assert app.screen is form and "a name first" in str(form.query_one("#spawn-said", Static).render())
            await pilot.press(*"helper", "enter")
            assert app.screen is form and "a kind (--agent) or a command" in str(
                form.query_one("#spawn-said", Static).render())
            assert form.focused is not None and form.focused.id == "spawn-agent"  # where it is missing
            await pilot.press("tab", *"sleep 600", "enter")  # the command field, next
            await until(pilot, lambda: "helper is running" in said(app))
            assert said(app).startswith(f"spawn: helper is running on tmux server {server} (cwd {ws.root})"), \
                said(app)
            await until(pilot, lambda: "helper" in names(app))
            assert "helper" in names(app)
            # a directory below the workspace root; then one that is not there: spawn's own refusal
            await fill(pilot, await open_form(pilot, app), name="below", command="sleep 600", cwd="sub")
            await until(pilot, lambda: "below" in names(app))
            await fill(pilot, await open_form(pilot, app), name="bad", command="sleep 600", cwd="/nowhere/at-all")
            await until(pilot, lambda: "not a directory" in said(app))
            assert said(app) == "spawn: --cwd /nowhere/at-all: not a directory", said(app)
            form = await open_form(pilot, app)
            await pilot.press(*"gone", "escape")  # Escape: nothing started
            assert not isinstance(app.screen, SpawnForm)

    asyncio.run(scenario())
    found = rows(ws)
    assert found["helper"]["spec"]["cwd"] == str(ws.root) and found["helper"]["server"] == server
    assert found["below"]["spec"]["cwd"] == str(ws.root / "sub")
    assert tmux.run(server, "has-session", "-t", "=helper", check=False).returncode == 0
    assert "bad" not in found and "gone" not in found


STATES = ('schema: 1\nkinds:\n  sh1:\n    programs: [sh]\n    new_session: ["-c", "touch pwned; exec sleep 600", '
          '"{session}"]\n')


@needs_tmux
def test_a_workspace_kind_is_asked_about_as_spawn_asks_no_refuses_yes_runs(ws: Workspace, tmux: Tmux) -> None:
    """A clone's .mam/states.yaml names the program of kind sh1 and its words: `mam spawn` at a terminal shows the
    argv and asks; the view asks the same. No: the CLI's refusal, nothing written or started; y: it runs."""
    server = tmux.name()
    (ws.root / ".mam").mkdir(exist_ok=True)
    (ws.root / ".mam" / "states.yaml").write_text(STATES)
    app = TopApp(Actions(App.open(str(ws.root), None, ws.env), [server]), interval=0.2)

    async def scenario() -> None:
        async with app.run_test(size=(160, 30)) as pilot:
            await fill(pilot, await open_form(pilot, app), name="evil", agent="sh1")
            await until(pilot, lambda: isinstance(app.screen, Consent))
            assert isinstance(app.screen, Consent)
            shown = app.screen.text
            assert "evil (tmux server" in shown and "named by this workspace's .mam/states.yaml" in shown, shown
            assert "  argv: sh -c 'touch pwned; exec sleep 600' " in shown, shown  # and its session id
            assert f"  cwd: {ws.root}" in shown and shown.endswith("run it, and sign it as yours? [y/N]")
            await pilot.press("n")
            await until(pilot, lambda: "not run" in said(app))
            assert said(app).startswith("spawn: evil: its program is named by this workspace's .mam/states.yaml"), \
                said(app)
            assert not (ws.root / "pwned").exists() and "evil" not in rows(ws)
            await fill(pilot, await open_form(pilot, app), name="evil", agent="sh1")
            await until(pilot, lambda: isinstance(app.screen, Consent))
            await pilot.press("y")
            await until(pilot, lambda: "evil" in names(app))
            assert "evil" in names(app) and said(app).startswith("spawn: evil is running"), said(app)

    asyncio.run(scenario())
    assert rows(ws)["evil"]["spec"]["cwd"] == str(ws.root)
    assert tmux.run(server, "has-session", "-t", "=evil", check=False).returncode == 0
    deadline = time.monotonic() + 30
    while not (ws.root / "pwned").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (ws.root / "pwned").exists()  # the workspace's words ran, with the user's yes


def wait_for(check: Callable[[], bool], what: Callable[[], str], limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, what()
        time.sleep(0.2)


@needs_tmux
def test_n_in_a_real_terminal(ws: Workspace, tmux: Tmux) -> None:
    """`mam top` in a tmux pane (a real terminal, 120x30), keys typed into it as a person types them: n, the
    form, Enter; the new agent is a row on that screen and in the registry."""
    server, view = tmux.name(), tmux.name()
    assert ws.mam("spawn", "first", "--server", server, "--command", "sleep 600").returncode == 0
    top = shlex.join([sys.executable, "-m", "mam", "top", "--server", server, "--interval", "0.5"])
    tmux.run(view, "new-session", "-d", "-x", "120", "-y", "30", "-s", "view", "-c", str(ws.root),
             "env", "TERM=xterm-256color", "sh", "-c", top)

    def shown() -> str:
        return tmux.run(view, "capture-pane", "-p", "-t", "view", check=False).stdout

    wait_for(lambda: "first" in shown(), shown)
    tmux.run(view, "send-keys", "-t", "view", "n")
    wait_for(lambda: "spawn a new agent" in shown(), shown)
    assert str(ws.root) in shown() and server in shown()  # the defaults, on screen
    def field(label: str) -> str:
        return next((line for line in shown().splitlines() if f"│ {label} " in line), "")

    tmux.run(view, "send-keys", "-t", "view", "-l", "from-top")
    wait_for(lambda: "from-top" in field("name"), shown)
    for _ in range(2):  # kind, then command
        tmux.run(view, "send-keys", "-t", "view", "Tab")
    tmux.run(view, "send-keys", "-t", "view", "-l", "sleep 600")
    wait_for(lambda: "sleep 600" in field("command"), shown)
    tmux.run(view, "send-keys", "-t", "view", "Enter")
    wait_for(lambda: "from-top" in rows(ws), shown)
    wait_for(lambda: any(line.split()[:1] == ["from-top"] for line in shown().splitlines()), shown)
    assert "spawn: from-top is running" in shown(), shown()
    assert rows(ws)["from-top"]["spec"]["cwd"] == str(ws.root)
    tmux.run(view, "send-keys", "-t", "view", "q")
    wait_for(lambda: tmux.run(view, "has-session", "-t", "=view", check=False).returncode != 0, shown)
