"""The no-loss rule of `mam worktree remove`, as a property on random repositories with random unsaved work (real
git): without --force, a removal never takes a commit only that worktree reaches, nor a changed or untracked file;
with --force, everything that was there is in the saved mam/lost/ branch (or held by a ref already)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_worktrees import git, make_repo

from mam.agents import worktrees

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

ENV = {"PATH": os.environ["PATH"], "HOME": "/nonexistent"}
NAMES = st.sampled_from(["a.txt", "b c.txt", "d/e.txt", "new\nline.txt", "x.log", "tracked.txt"])
OPS = st.lists(st.tuples(st.sampled_from(["write", "delete", "commit", "detach_commit", "stage"]), NAMES,
                         st.integers(0, 3)), max_size=6)


def _files(place: Path) -> dict[str, str]:
    """Every file of the worktree git would keep (tracked or untracked, not ignored), with its content."""
    names = git(place, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    return {n: (place / n).read_text() for n in names if n and (place / n).is_file()}


def _reachable(repo: Path) -> set[str]:
    return set(git(repo, "rev-list", "--branches", "--tags", "--remotes").split())


def _tree_files(repo: Path, ref: str) -> dict[str, str]:
    names = git(repo, "ls-tree", "-r", "-z", "--name-only", ref).split("\0")
    return {n: git(repo, "show", f"{ref}:{n}") for n in names if n}


def _apply(place: Path, ops: list[tuple[str, str, int]]) -> None:
    for op, name, n in ops:
        path = place / name
        if op == "write":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"content {n}\n")
        elif op == "delete" and path.is_file():
            path.unlink()
        elif op in ("commit", "detach_commit"):
            if op == "detach_commit":
                git(place, "checkout", "-q", "--detach")
            git(place, "add", "-A")
            git(place, "commit", "-q", "--allow-empty", "-m", f"commit {n}")
        elif op == "stage" and path.exists():
            git(place, "add", "-f", "--", name)  # -f: x.log is ignored, and staged by force it is work too


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS, force=st.booleans(), delete_branch=st.booleans())
@example(ops=[("write", "a.txt", 1), ("commit", "a.txt", 1)], force=False, delete_branch=True)  # the branch's own
@example(ops=[("detach_commit", "a.txt", 1), ("write", "new\nline.txt", 2), ("write", "x.log", 3)], force=True,
         delete_branch=True)
# An ignored file staged by force is work too (a CI run drew it: `git add` without -f refused it).
@example(ops=[("write", "x.log", 0), ("stage", "x.log", 0)], force=False, delete_branch=False)
@example(ops=[("write", "x.log", 0), ("stage", "x.log", 0)], force=True, delete_branch=True)
def test_remove_never_loses_work(ops: list[tuple[str, str, int]], force: bool, delete_branch: bool) -> None:
    top = Path(tempfile.mkdtemp(prefix="wtprop"))
    try:
        repo = top / "repo"
        make_repo(repo)
        record = worktrees.make(str(repo), "p", "mam/p", 30, ENV, local=True)
        place = Path(record["path"])
        _apply(place, ops)
        files = _files(place)
        head = git(place, "rev-parse", "HEAD").strip()
        commits = set(git(place, "rev-list", "HEAD", "refs/heads/mam/p").split())
        clean = git(place, "status", "--porcelain", "--untracked-files=all") == ""
        only_here = commits - set(git(repo, "rev-list", "main").split())
        removal = worktrees.remove(record, "p", 30, ENV, force=force, delete_branch=delete_branch)
        if not removal.removed:
            assert not force or removal.losses.submodules or removal.losses.unreadable
            assert place.is_dir() and _files(place) == files  # refused: nothing touched
            assert git(repo, "branch", "--list", "mam/p").strip()
            return
        assert not place.exists()
        assert commits <= _reachable(repo)  # every commit is still held by a ref
        if not force:
            assert clean  # a changed or untracked file is never removed without --force
            if delete_branch:
                assert not only_here
            return
        kept = removal.saved_to or head
        assert _tree_files(repo, kept) == files  # the saved branch holds every file as it was
    finally:
        shutil.rmtree(top, ignore_errors=True)
