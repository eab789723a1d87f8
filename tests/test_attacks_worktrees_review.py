"""An attacker's review of the worktree feature (issue 34; docs/trust.md, "A worktree's work is never lost" and "A
registry never points mam at a folder"): each test here failed on the code before its fix.

Real git on repositories made here, real tmux on private sockets; HOME is the test's own."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_worktrees import git, listed, make_repo

from mam.agents import worktrees

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None or shutil.which("git") is None,
                                reason="tmux or git is not installed")

ENV = {"PATH": os.environ["PATH"], "HOME": "/nonexistent"}


@pytest.fixture
def repo() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(prefix="wtreview"))
    try:
        make_repo(top / "repo")
        yield top / "repo"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_force_delete_branch_keeps_the_branchs_commits_that_head_does_not_reach(repo: Path) -> None:
    """The agent committed on its branch, then moved HEAD away (detached, or another branch): `--force
    --delete-branch` saved HEAD's state only and deleted the branch, and its commit was gone."""
    record = worktrees.make(str(repo), "p", "mam/p", 30, ENV, local=True)
    place = Path(record["path"])
    (place / "a.txt").write_text("precious\n")
    git(place, "add", "-A")
    git(place, "commit", "-q", "-m", "precious")
    precious = git(place, "rev-parse", "HEAD").strip()
    git(place, "checkout", "-q", "--detach", "HEAD~1")
    (place / "b.txt").write_text("unsaved\n")
    removal = worktrees.remove(record, "p", 30, ENV, force=True, delete_branch=True)
    assert removal.removed and removal.saved_to
    assert precious in removal.losses.commits  # it was listed as what would be lost ...
    assert precious in git(repo, "rev-list", removal.saved_to).split()  # ... and it is in the saved branch
    assert git(repo, "show", f"{removal.saved_to}:b.txt") == "unsaved\n"

def test_force_never_removes_a_repository_the_agent_made_inside_its_worktree(repo: Path) -> None:
    """An untracked repository inside the worktree (the agent cloned a dependency, or `git init`ed a tool) is
    saved by `git add` as a bare gitlink: `--force` then deleted its commits and its uncommitted files."""
    record = worktrees.make(str(repo), "p", "mam/p", 30, ENV, local=True)
    place = Path(record["path"])
    inner = place / "vendor" / "lib"
    make_repo(inner)
    (inner / "work.txt").write_text("uncommitted, in the inner repository\n")
    removal = worktrees.remove(record, "p", 30, ENV, force=True, delete_branch=False)
    assert not removal.removed
    assert removal.losses.submodules == ["vendor/lib/"]
    assert (inner / "work.txt").read_text() == "uncommitted, in the inner repository\n"
    assert str(place) in listed(repo)
