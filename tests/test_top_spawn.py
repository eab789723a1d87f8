"""`mam top`'s `n`: a new agent from the view, through `mam spawn`'s own code (issue 33, point 8). A form asks
its name, kind or command, server and directory (the workspace root unless changed), and whether it gets a git
worktree of its own and on which branch (issue 34, as `mam spawn --worktree [--branch B]`); the agent it starts
is in the registry and in the table. A launch spec holding the workspace's words is asked about as the CLI asks at a
terminal (its argv shown, y/N): no refuses with the CLI's message and starts nothing, y runs it. Driven with
Textual's pilot over a real tmux server, and once as a person would: `mam top` in a real terminal (a tmux pane),
keys typed into it."""

from __future__ import annotations

import asyncio
import functools
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
from test_worktrees import git, listed, make_repo
from textual.widgets import Checkbox, Input, Static

from mam.cli.topspawn import MARK, Consent, SpawnForm
from mam.cli.topview import Pager, TopApp
from mam.live.actions import Actions
from mam.servers.app import App

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def marked(form: SpawnForm) -> str:
    """The label the form marks as the one with the focus ("" for none)."""
    found = [str(label.render()) for label in form.query(".label")]
    return next((text.removeprefix(MARK) for text in found if text.startswith(MARK)), "")


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
            assert form.values() == {"name": "", "agent": "", "command": "", "server": server, "cwd": str(ws.root),
                                     "worktree": "", "branch": ""}
            assert marked(form) == "name"  # where typing goes, marked on its label
            await pilot.press("enter")  # nothing typed: the form says what it needs, and stays
            assert app.screen is form and "a name first" in str(form.query_one("#spawn-said", Static).render())
            await pilot.press(*"helper", "enter")
            assert app.screen is form and "a kind (--agent) or a command" in str(
                form.query_one("#spawn-said", Static).render())
            assert form.focused is not None and form.focused.id == "spawn-agent"  # where it is missing
            assert marked(form) == "kind"
            await pilot.press("tab")  # the command field, next
            await until(pilot, lambda: marked(form) == "command")
            await pilot.press(*"sleep 600", "enter")
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
            await pilot.press(*"gone", "tab", *"sleep 600", "escape")  # Escape: nothing started
            await until(pilot, lambda: not isinstance(app.screen, SpawnForm))
            assert not isinstance(app.screen, SpawnForm) and "gone" not in names(app)

    asyncio.run(scenario())
    found = rows(ws)
    assert found["helper"]["spec"]["cwd"] == str(ws.root) and found["helper"]["server"] == server
    assert found["below"]["spec"]["cwd"] == str(ws.root / "sub")
    assert tmux.run(server, "has-session", "-t", "=helper", check=False).returncode == 0
    assert "bad" not in found and "gone" not in found


@needs_tmux
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_worktree_choice_makes_the_agent_a_worktree_of_its_own(ws: Workspace, tmux: Tmux) -> None:
    """Ticked with no branch: .mam/worktrees/NAME of the workspace's repository on mam/NAME, the agent started
    there (as `mam spawn NAME --worktree`); with a branch: on that branch. A branch without the tick is said and
    the form stays, as the CLI refuses --branch without --worktree."""
    head = make_repo(ws.root)
    server = tmux.name()
    app = TopApp(Actions(App.open(str(ws.root), None, ws.env), [server]), interval=0.2)

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            form = await open_form(pilot, app)
            bottom = form.query_one("#spawn-said", Static).region.bottom  # the whole form fits 80x24
            assert 0 < bottom <= 23, bottom
            for key, value in (("name", "w1"), ("command", "sleep 600")):
                form.query_one(f"#spawn-{key}", Input).value = value
            form.query_one("#spawn-branch", Input).focus()
            await pilot.press(*"feature/x", "enter")  # a branch, the worktree not chosen: said, stays
            said_here = str(form.query_one("#spawn-said", Static).render())
            assert app.screen is form and "--branch is for --worktree" in said_here, said_here
            assert form.focused is not None and form.focused.id == "spawn-worktree" and marked(form) == "worktree"
            await pilot.press("space")  # ticked, as a person ticks it
            await until(pilot, lambda: form.query_one("#spawn-worktree", Checkbox).value)
            assert form.values()["worktree"] == "yes"
            assert str(form.query_one("#spawn-worktree", Checkbox).label).startswith("yes: ")  # in words, too
            form.query_one("#spawn-branch", Input).value = ""  # the default branch, mam/w1
            await pilot.press("tab")
            await until(pilot, lambda: marked(form) == "branch")
            await pilot.press("enter")
            await until(pilot, lambda: "w1" in names(app) and "w1 is running" in said(app))
            place = ws.root / ".mam" / "worktrees" / "w1"
            assert said(app) == f"spawn: w1 is running on tmux server {server} (cwd {place}, branch mam/w1)", \
                said(app)
            form = await open_form(pilot, app)
            await fill(pilot, form, name="w2", command="sleep 600", branch="feature/x")  # still no tick: stays
            assert app.screen is form
            form.query_one("#spawn-worktree", Checkbox).value = True
            form.query_one("#spawn-branch", Input).focus()
            await pilot.press("enter")
            await until(pilot, lambda: "w2" in names(app) and "w2 is running" in said(app))
            assert said(app).endswith("branch feature/x)"), said(app)

    asyncio.run(scenario())
    for name, branch in (("w1", "mam/w1"), ("w2", "feature/x")):
        place = ws.root / ".mam" / "worktrees" / name
        assert str(place) in listed(ws.root)
        assert git(place, "rev-parse", "--abbrev-ref", "HEAD").strip() == branch
        assert git(place, "rev-parse", "HEAD").strip() == head
        record = rows(ws)[name]["spec"]
        assert record["cwd"] == str(place)
        assert record["worktree"] == {"path": str(place), "branch": branch, "base": head, "repo": str(ws.root),
                                      "made_by_mam": True}
        pane = tmux.run(server, "list-panes", "-t", f"={name}", "-F", "#{pane_current_path}").stdout.strip()
        assert pane == str(place)


def test_a_default_the_terminal_would_act_on_is_left_out_of_the_form() -> None:
    """The directory default is the workspace root's path, which may hold an escape sequence: never drawn in the
    form (its field left empty, which is the same default); a plain one is filled in."""
    form = SpawnForm({"server": "main", "cwd": "/tmp/a\x1b]52;c;aGk=\x07b"})
    assert form.defaults == {"server": "main"}
    assert SpawnForm({"server": "main", "cwd": "/tmp/plain dir"}).defaults == {"server": "main",
                                                                                "cwd": "/tmp/plain dir"}


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
            await until(pilot, lambda: "evil" in names(app) and "evil is running" in said(app))
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
        return next((line for line in shown().splitlines() if f"│ {label} " in line or f"│ {MARK}{label} " in line),
                    "")

    wait_for(lambda: f"{MARK}name " in field("name"), shown)  # the focus is on the name
    tmux.run(view, "send-keys", "-t", "view", "-l", "from-top")
    wait_for(lambda: "from-top" in field("name"), shown)
    def focus_on(label: str) -> bool:
        return f"{MARK}{label} " in field(label)

    for label in ("kind", "command"):  # one Tab at a time, each seen to land
        tmux.run(view, "send-keys", "-t", "view", "Tab")
        wait_for(functools.partial(focus_on, label), shown)
    tmux.run(view, "send-keys", "-t", "view", "-l", "sleep 600")
    wait_for(lambda: "sleep 600" in field("command"), shown)
    tmux.run(view, "send-keys", "-t", "view", "Enter")
    wait_for(lambda: "from-top" in rows(ws), shown)
    wait_for(lambda: any(line.split()[:1] == ["from-top"] for line in shown().splitlines()), shown)
    assert "spawn: from-top is running" in shown(), shown()
    assert rows(ws)["from-top"]["spec"]["cwd"] == str(ws.root)
    tmux.run(view, "send-keys", "-t", "view", "q")
    wait_for(lambda: tmux.run(view, "has-session", "-t", "=view", check=False).returncode != 0, shown)


def test_a_long_argv_to_consent_to_scrolls_and_the_question_stays_in_sight() -> None:
    """A workspace kind's argv long enough to fill 80x24: the box was taller than the screen, its end (what the
    argv ends with) and the question cut off, and any key answered, so the rest could not be read before a y.
    Now it scrolls (End shows the end; no answer), the question stays seen, y still runs it."""
    from textual.app import App as TextualApp

    entry = {"name": "evil", "backend": "tmux", "server": "s", "host": None, "spec_trust": "workspace",
             "argv": ["sh", *(f"--harmless-{i:03d}" for i in range(300)), "--DANGER-AT-END"], "cwd": "/tmp",
             "env_names": []}
    answers: list[bool] = []

    class Host(TextualApp[None]):
        def on_mount(self) -> None:
            self.push_screen(Consent(entry), answers.append)

    async def scenario() -> None:
        app = Host()
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, Consent))
            await pilot.pause(0.1)
            shot = app.export_screenshot()
            assert "y/N]" in shot and "--DANGER-AT-END" not in shot
            await pilot.press("end")
            await pilot.pause(0.1)
            assert isinstance(app.screen, Consent) and not answers  # reading on is no answer
            shot = app.export_screenshot()
            assert "--DANGER-AT-END" in shot and "y/N]" in shot
            await pilot.press("y")
            await until(pilot, lambda: bool(answers))
            assert answers == [True]

    asyncio.run(scenario())


@needs_tmux
@pytest.mark.parametrize("field, value", [("name", "-L"), ("name", "a;touch x"), ("name", "$(id)"),
                                          ("name", "a\nb"), ("name", "#{pane_id}"), ("server", "-x"),
                                          ("server", "s\rs")])
def test_the_form_refuses_a_name_the_contract_refuses_before_any_tmux_runs(
        ws: Workspace, tmux: Tmux, field: str, value: str) -> None:
    """A name or server name not of `[A-Za-z0-9][A-Za-z0-9._-]*` is bad input (the CLI's exit 2) before any
    backend process starts: typed into top's form too, it reaches neither tmux nor the registry."""
    from mam.util.errors import EXIT_BAD_INPUT, MamError

    actions = Actions(App.open(str(ws.root), "tmux", ws.env))
    form = {"name": "ok1", "server": tmux.name(), "command": "sleep 60", field: value}
    with pytest.raises(MamError) as refused:
        actions.spawn(form)
    assert refused.value.exit_code == EXIT_BAD_INPUT, refused.value
    assert tmux.sockets() == [] and rows(ws) == {}
