"""A clone's `.mam/worktrees` link never takes `mam spawn --worktree` outside the workspace (docs/trust.md, "A link in
`.mam/` never takes mam's reads or writes outside the workspace").

`.mam/worktrees -> /elsewhere` once made spawn check the repository out there, write its lock and .gitignore
there, and start the agent in it. Real git and real tmux on a private socket; HOME is the test's own."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_worktrees import git, listed, make_repo, spawn

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


def test_a_link_that_stays_inside_is_refused_too(ws: Workspace, tmux: Tmux) -> None:
    """A clone's `.mam/worktrees -> ../src`: mam would check the agent out into src/ and write its `*` .gitignore
    there, and git status would no longer show the project's new files in src/."""
    make_repo(ws.root)
    inside = ws.root / "src"
    inside.mkdir()
    (inside / "module.py").write_text("x = 1\n")
    (ws.root / ".mam").mkdir(exist_ok=True)
    (ws.root / ".mam" / "worktrees").symlink_to(Path("..") / "src")
    server = tmux.name()
    proc = spawn(ws, server, "w1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "a symbolic link" in proc.stderr and "remove the link" in proc.stderr
    assert sorted(p.name for p in inside.iterdir()) == ["module.py"]  # no checkout, no lock, no .gitignore
    assert listed(ws.root) == [str(ws.root)]
    assert tmux.run(server, "has-session", "-t", "=w1", check=False).returncode != 0


def _bare_repository_with_a_filter(root: Path, marker: Path) -> Path:
    """What a clone can carry: a bare repository's files (HEAD, config, objects/) whose config names a clean
    filter, and beside it a work tree whose .gitattributes applies it to a file git must hash again."""
    source = root / "src"
    make_repo(source)
    (source / ".gitattributes").write_text("tracked.txt filter=f\n")
    git(source, "add", "-A")
    git(source, "commit", "-q", "-m", "attributes")
    planted = root / "evil"
    shutil.copytree(source / ".git", planted)
    shutil.copy(source / "tracked.txt", root / "tracked.txt")
    shutil.copy(source / ".gitattributes", root / ".gitattributes")
    shutil.rmtree(source)
    (planted / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ..\n"
                                    f'[filter "f"]\n\tclean = "touch {marker} && cat"\n')
    os.utime(root / "tracked.txt", (978307200, 978307200))  # not what the index says: git runs the filter
    return planted


def test_a_row_never_makes_git_run_a_clones_bare_repository(ws: Workspace, tmp_path: Path) -> None:
    """`mam status` and `mam worktree list` read the work of every worktree a row records, signed or not: a row
    naming a bare repository the clone carries no longer runs the filter its config names."""
    marker = tmp_path / "PWNED"
    planted = _bare_repository_with_a_filter(ws.root, marker)
    record = {"path": str(planted), "branch": "main", "base": "0" * 40, "repo": str(planted), "made_by_mam": True}
    row = {"name": "x1", "backend": "tmux", "server": "s", "status": "stopped",
           "spec": {"command": "sleep 1", "args": [], "cwd": str(ws.root), "env_names": [], "worktree": record}}
    ws.write_registry("version: 1\nsessions:\n- " + json.dumps(row) + "\n")
    listing = ws.mam_json("worktree", "list")
    assert [(e["name"], e["state"]) for e in listing["worktrees"]] == [("x1", "unknown")]
    ws.mam("status")
    assert not marker.exists()
