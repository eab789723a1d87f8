"""A clone's `.mam/worktrees` link never takes `mam spawn --worktree` outside the workspace (docs/trust.md, "A link in
`.mam/` never takes mam's reads or writes outside the workspace").

`.mam/worktrees -> /elsewhere` once made spawn check the repository out there, write its lock and .gitignore
there, and start the agent in it. Real git and real tmux on a private socket; HOME is the test's own."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_worktrees import listed, make_repo, spawn

from conftest import Tmux, Workspace

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None or shutil.which("git") is None,
                                reason="tmux or git is not installed")


def _refused(ws: Workspace, tmux: Tmux, server: str, repo: Path, outside: Path, proc_args: tuple[str, ...]) -> None:
    proc = spawn(ws, server, "w1", *proc_args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "symbolic link leading outside the workspace" in proc.stderr and str(outside) in proc.stderr
    assert list(outside.iterdir()) == []  # no checkout, no lock, no .gitignore
    assert listed(repo) == [str(repo)]
    assert tmux.run(server, "has-session", "-t", "=w1", check=False).returncode != 0
    assert not ws.registry.exists() or "w1" not in ws.registry.read_text()


def test_a_linked_worktrees_folder_of_the_workspace_is_refused(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    make_repo(ws.root)
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws.root / ".mam").mkdir(exist_ok=True)
    (ws.root / ".mam" / "worktrees").symlink_to(outside)
    _refused(ws, tmux, tmux.name(), ws.root, outside, ())


def test_a_linked_worktrees_folder_of_the_cwds_repository_is_refused(ws: Workspace, tmux: Tmux,
                                                                      tmp_path: Path) -> None:
    other = ws.root / "vendor" / "clone"  # a repository cloned inside the workspace, with its own .mam
    make_repo(other)
    outside = tmp_path / "outside"
    outside.mkdir()
    (other / ".mam").symlink_to(outside)  # the whole .mam of the clone leads out
    _refused(ws, tmux, tmux.name(), other, outside, ("--cwd", str(other)))


def test_a_link_that_stays_inside_is_followed(ws: Workspace, tmux: Tmux) -> None:
    make_repo(ws.root)
    inside = ws.root / "trees"
    inside.mkdir()
    (ws.root / ".mam").mkdir(exist_ok=True)
    (ws.root / ".mam" / "worktrees").symlink_to(inside)
    server = tmux.name()
    proc = spawn(ws, server, "w1")
    assert proc.returncode == 0, proc.stderr
    assert (inside / "w1" / "tracked.txt").is_file()
    assert ws.mam("stop", "w1", "--server", server).returncode == 0
