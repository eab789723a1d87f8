"""Where a person sees an agent's worktree (issue 34, 2): `mam top` at every width, a stopped agent's unsaved
work, a worktree git cannot read (`unknown`, never clean), and what reading them costs in git calls. Real git
on repositories made here, real tmux on private sockets, the view driven by Textual's headless driver."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_worktrees import git, make_repo, spawn

from conftest import Tmux, Workspace

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None or shutil.which("git") is None,
                                reason="tmux or git is not installed")


def _fleet(ws: Workspace, tmux: Tmux) -> str:
    """tw1 alive with a commit since its base and an untracked file; tw2 alive in a worktree git cannot read;
    tw3 stopped with a file it never committed. Returns the server."""
    make_repo(ws.root)
    server = tmux.name()
    for name in ("tw1", "tw2", "tw3"):
        assert spawn(ws, server, name).returncode == 0
    places = ws.root / ".mam" / "worktrees"
    git(places / "tw1", "commit", "-q", "--allow-empty", "-m", "work")
    (places / "tw1" / "new.txt").write_text("x\n")
    (places / "tw2" / ".git").write_text("gitdir: /nonexistent/nothing\n")
    (places / "tw3" / "unsaved.txt").write_text("y\n")
    assert ws.mam("stop", "tw3").returncode == 0
    return server


def test_top_shows_the_work_at_every_width_and_never_calls_unread_clean(ws: Workspace, tmux: Tmux) -> None:
    """Wide: a WORK column (kept over HOST and BACKEND). Too narrow for it: the same words in brackets after the
    reason, so unsaved work never drops out of sight. A worktree git cannot read says `unknown`; a stopped agent's
    row still says what it left uncommitted."""
    pytest.importorskip("textual")
    from test_top_tmux import until
    from textual.widgets import DataTable

    from mam.cli.topview import TopApp
    from mam.live.actions import Actions
    from mam.servers.app import App

    server = _fleet(ws, tmux)
    app = TopApp(Actions(App.open(str(ws.root), None, ws.env), [server]), interval=0.2)
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            table = app.query_one(DataTable)

            def cells() -> dict[str, list[str]]:
                return {str(table.get_row_at(i)[0]): [str(c) for c in table.get_row_at(i)]
                        for i in range(table.row_count)}

            def headers() -> list[str]:
                return [str(c.label) for c in table.columns.values()]

            await until(pilot, lambda: all("[mam/" in (cells().get(n) or [""])[-1] for n in ("tw1", "tw2", "tw3")))
            seen["narrow"], seen["narrow_headers"] = cells(), headers()
            seen["narrow_screen"] = app.export_screenshot()
            await pilot.resize_terminal(120, 30)
            await until(pilot, lambda: "WORK" in headers())
            seen["wide"], seen["wide_headers"] = cells(), headers()
            seen["wide_screen"] = app.export_screenshot()

    asyncio.run(scenario())
    assert seen["narrow_headers"] == ["NAME", "SERVER", "STATE", "FOR", "WHY"], seen["narrow_headers"]
    narrow = {name: row[-1] for name, row in seen["narrow"].items()}
    assert narrow["tw1"].endswith("[mam/tw1 1 changed +1]"), narrow
    assert narrow["tw2"].endswith("[mam/tw2 unknown]") and "clean" not in narrow["tw2"], narrow
    assert narrow["tw3"].endswith("[mam/tw3 1 changed]"), narrow  # stopped, its work still in sight
    assert seen["wide_headers"] == ["NAME", "BACKEND", "SERVER", "STATE", "FOR", "WORK", "WHY"], seen["wide_headers"]
    at = seen["wide_headers"].index("WORK")
    wide = {name: row[at] for name, row in seen["wide"].items()}
    assert wide == {"tw1": "mam/tw1 1 changed +1", "tw2": "mam/tw2 unknown", "tw3": "mam/tw3 1 changed"}, wide
    assert all("[mam/" not in row[-1] for row in seen["wide"].values())  # said once, in its column
    for word in ("mam/tw1", "1&#160;changed&#160;+1", "mam/tw2&#160;unknown"):  # as drawn on the screen
        assert word in seen["wide_screen"], word


def _git_logged(tmp_path: Path, env: dict[str, str]) -> tuple[dict[str, str], Path]:
    """`env` with a `git` first on PATH that logs its argv (one line per call) and runs the real one."""
    shim, log = tmp_path / "gitlog", tmp_path / "git.log"
    shim.mkdir()
    real = shutil.which("git")
    (shim / "git").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{real}" "$@"\n')
    (shim / "git").chmod(0o755)
    return {**env, "PATH": f"{shim}{os.pathsep}{env['PATH']}"}, log


def test_a_status_reads_each_worktree_with_one_git_status_and_counts_ahead_once_per_head(
        ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    """Issue 34, 2: one `git status` per worktree per status; `ahead` (commits since the base) takes a second call
    only when HEAD moved, once per HEAD in a process, so a live view asks it again only after a commit."""
    from mam.agents.statusview import status_document
    from mam.servers.app import App

    make_repo(ws.root)
    server = tmux.name()
    assert spawn(ws, server, "c1").returncode == 0
    assert spawn(ws, server, "c2").returncode == 0
    one = ws.root / ".mam" / "worktrees" / "c1"
    env, log = _git_logged(tmp_path, ws.env)
    app = App.open(str(ws.root), None, env)

    def read() -> tuple[dict[str, Any], list[str]]:
        log.unlink(missing_ok=True)
        doc = status_document(app, with_state=False)
        calls = log.read_text().splitlines() if log.exists() else []
        return {s["name"]: s["worktree"] for s in doc["sessions"]}, calls

    def subcommands(calls: list[str], word: str) -> int:
        return sum(1 for call in calls if f" {word} " in f" {call} ")

    work, calls = read()
    assert (work["c1"]["ahead"], work["c2"]["ahead"]) == (0, 0)
    assert subcommands(calls, "status") == 2 and subcommands(calls, "rev-list") == 0, calls  # HEAD never moved
    git(one, "commit", "-q", "--allow-empty", "-m", "one")
    work, calls = read()
    assert work["c1"]["ahead"] == 1 and subcommands(calls, "rev-list") == 1 and subcommands(calls, "status") == 2
    for _ in range(3):  # the same HEAD: counted already
        work, calls = read()
        assert work["c1"]["ahead"] == 1 and subcommands(calls, "rev-list") == 0, calls
        assert subcommands(calls, "status") == 2, calls
    git(one, "commit", "-q", "--allow-empty", "-m", "two")
    work, calls = read()
    assert work["c1"]["ahead"] == 2 and subcommands(calls, "rev-list") == 1, calls
