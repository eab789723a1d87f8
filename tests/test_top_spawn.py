"""`mam top`'s `n`: a new agent from the view, through `mam spawn`'s own code (issue 33, point 8): typed as
spawn's own words, started in the workspace root, shown in the table; refused as the CLI refuses (a workspace
kind's program without consent), said on the bottom line, nothing written."""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

import pytest
import yaml

from conftest import Tmux, Workspace
from mam.live.actions import spawn_words
from mam.util.errors import MamError

pytest.importorskip("textual")

from test_top_tmux import names, said, until
from textual.widgets import Input

from mam.cli.topview import Ask, TopApp
from mam.live.actions import Actions
from mam.servers.app import App


def test_the_form_reads_spawns_own_words() -> None:
    assert spawn_words("helper --command 'sleep 600' --server work --cwd '/a b'") == {
        "name": "helper", "agent": None, "command": "sleep 600", "server": "work", "cwd": "/a b", "worktree": None,
        "trust_spec": False}
    assert spawn_words("c1 --agent claude --worktree --branch feat/x --trust-spec") == {
        "name": "c1", "agent": "claude", "command": None, "worktree": "feat/x", "trust_spec": True}
    assert spawn_words("c2 --agent claude --worktree")["worktree"] == ""  # mam/NAME, as the CLI's --worktree
    for text, says in (("--agent claude", "name comes first"), ("c3", "--agent KIND or --command CMD"),
                       ("c4 --agent", "--agent needs a value"), ("c5 --agent claude --exec x", "'--exec'"),
                       ("c6 --command 'sleep", "cannot read that")):
        with pytest.raises(MamError) as caught:
            spawn_words(text)
        assert caught.value.code == "usage" and says in caught.value.message, (text, caught.value.message)


async def _type(pilot: Any, app: TopApp, text: str) -> None:
    await pilot.press("n")
    await until(pilot, lambda: isinstance(app.screen, Ask))
    assert isinstance(app.screen, Ask) and "NAME [--agent KIND]" in app.screen.title_text
    app.screen.query_one(Input).value = text
    await pilot.press("enter")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_n_spawns_an_agent_in_the_workspace_root_and_the_view_shows_it(ws: Workspace, tmux: Tmux) -> None:
    server = tmux.name()
    assert ws.mam("spawn", "first", "--server", server, "--command", "sleep 600").returncode == 0
    app = TopApp(Actions(App.open(str(ws.root), None, ws.env), [server]), interval=0.2)

    async def scenario() -> None:
        async with app.run_test(size=(140, 30)) as pilot:
            await until(pilot, lambda: "first" in names(app))
            await _type(pilot, app, "helper --command 'sleep 600'")
            await until(pilot, lambda: said(app).startswith("spawn: helper is running"))
            assert said(app).startswith(f"spawn: helper is running on tmux server {server}"), said(app)
            await until(pilot, lambda: "helper" in names(app))
            assert "helper" in names(app)
            await _type(pilot, app, "bad --server")  # bad input: said, the view goes on
            await until(pilot, lambda: "--server needs a value" in said(app))
            assert "--server needs a value" in said(app)

    asyncio.run(scenario())
    rows = {r["name"]: r for r in yaml.safe_load(ws.registry.read_text())["sessions"]}
    assert rows["helper"]["spec"]["cwd"] == str(ws.root) and rows["helper"]["server"] == server
    assert tmux.run(server, "has-session", "-t", "=helper", check=False).returncode == 0
    assert "bad" not in rows


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_n_refuses_a_workspace_kinds_program_as_spawn_does(ws: Workspace, tmux: Tmux) -> None:
    """A clone's .mam/states.yaml names the program of kind sh1: the CLI runs it only with consent; so does `n`
    (typed --trust-spec is the consent; a question from the view is not asked)."""
    server = tmux.name()
    (ws.root / ".mam").mkdir(exist_ok=True)
    (ws.root / ".mam" / "states.yaml").write_text(
        'schema: 1\nkinds:\n  sh1:\n    programs: [sh]\n    new_session: ["-c", "touch pwned; exec sleep 600", '
        '"{session}"]\n')
    app = TopApp(Actions(App.open(str(ws.root), None, ws.env), [server]), interval=0.2)

    async def scenario() -> None:
        async with app.run_test(size=(160, 30)) as pilot:
            await _type(pilot, app, "evil --agent sh1")
            await until(pilot, lambda: "not run" in said(app))
            assert "spawn: evil:" in said(app) and "states.yaml" in said(app) and "not run" in said(app), said(app)

    asyncio.run(scenario())
    assert not ws.registry.exists() or "evil" not in ws.registry.read_text()
    assert not (ws.root / "pwned").exists()
    assert tmux.run(server, "has-session", "-t", "=evil", check=False).returncode != 0
