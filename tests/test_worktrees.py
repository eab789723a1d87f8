"""`mam spawn --worktree` and `mam worktree`: real git on repositories made here, real tmux on private sockets.

The rule under test (docs/trust.md): a worktree goes only when nothing would be lost; --force first saves it all
to a mam/lost/ branch; mam acts only on a worktree git lists and a row this user's mam signed says it made.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_schemas import assert_strict, validator

from conftest import Tmux, Workspace

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None or shutil.which("git") is None,
                                reason="tmux or git is not installed")

STAND_IN = "sleep 600"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def git(directory: Path, *args: str, check: bool = True) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent", **GIT_ENV}
    proc = subprocess.run(["git", "-C", str(directory), *args], env=env, capture_output=True, text=True,
                          timeout=30, check=False, stdin=subprocess.DEVNULL)
    if check:
        assert proc.returncode == 0, (args, proc.stderr)
    return proc.stdout


def make_repo(root: Path) -> str:
    """A repository at `root` with one commit (a tracked file, a .gitignore); its HEAD commit."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    (root / "tracked.txt").write_text("one\n")
    (root / ".gitignore").write_text("*.log\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")
    return git(root, "rev-parse", "HEAD").strip()


def spawn(ws: Workspace, server: str, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return ws.mam("spawn", name, "--server", server, "--worktree", *extra, "--command", STAND_IN)


def row_of(ws: Workspace, name: str) -> dict[str, Any]:
    rows = yaml.safe_load(ws.registry.read_text())["sessions"]
    found: dict[str, Any] = next(r for r in rows if r["name"] == name)
    return found


def listed(repo: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in git(repo, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")]


def test_spawn_makes_a_worktree_on_a_new_branch_and_starts_the_agent_there(ws: Workspace, tmux: Tmux) -> None:
    head = make_repo(ws.root)
    server = tmux.name()
    proc = spawn(ws, server, "w1")
    assert proc.returncode == 0, proc.stderr
    place = ws.root / ".mam" / "worktrees" / "w1"
    assert str(place) in listed(ws.root)
    assert git(place, "rev-parse", "--abbrev-ref", "HEAD").strip() == "mam/w1"
    pane_path = tmux.run(server, "list-panes", "-t", "=w1", "-F", "#{pane_current_path}").stdout.strip()
    assert pane_path == str(place)
    record = row_of(ws, "w1")["spec"]["worktree"]
    assert record == {"path": str(place), "branch": "mam/w1", "base": head, "repo": str(ws.root), "made_by_mam": True}
    # The repository's own status does not show the worktrees.
    assert ".mam/worktrees" not in git(ws.root, "status", "--porcelain", "--untracked-files=all")


def test_spawn_on_an_existing_branch_and_with_json(ws: Workspace, tmux: Tmux) -> None:
    make_repo(ws.root)
    git(ws.root, "branch", "feature")
    git(ws.root, "commit", "-q", "--allow-empty", "-m", "on main")
    doc = ws.mam_json("spawn", "w2", "--server", tmux.name(), "--worktree", "--branch", "feature", "--command",
                      STAND_IN)
    assert validator("spawn.json").is_valid(doc)  # its worktree is there with --worktree only
    assert doc["worktree"]["branch"] == "feature"
    assert doc["worktree"]["base"] == git(ws.root, "rev-parse", "feature").strip()
    assert doc["session"]["cwd"] == doc["worktree"]["path"]


def test_bad_input_is_refused_before_anything_is_made(ws: Workspace, tmux: Tmux) -> None:
    make_repo(ws.root)
    server = tmux.name()
    for bad in ("two..dots", "has space", "-x", "end.lock", "mam/lost/x"):
        proc = spawn(ws, server, "w3", "--branch", bad)
        assert proc.returncode == 2, (bad, proc.stderr)
        assert "branch" in proc.stderr
    assert listed(ws.root) == [str(ws.root)]
    assert not ws.registry.exists() or "w3" not in ws.registry.read_text()
    assert tmux.sockets() == []  # no server was started for it


def test_a_workspace_that_is_no_repository_is_exit_2(ws: Workspace, tmux: Tmux) -> None:
    proc = spawn(ws, tmux.name(), "w4")
    assert proc.returncode == 2 and "not in a git repository" in proc.stderr
    assert not (ws.root / ".mam" / "worktrees" / "w4").exists()


def test_the_repositorys_hooks_do_not_run(ws: Workspace, tmux: Tmux) -> None:
    make_repo(ws.root)
    marker = ws.root.parent / "hook-ran"
    hook = ws.root / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch '{marker}'\n")
    hook.chmod(0o755)
    assert spawn(ws, tmux.name(), "w5").returncode == 0
    assert not marker.exists()


def test_a_branch_checked_out_elsewhere_is_refused(ws: Workspace, tmux: Tmux) -> None:
    make_repo(ws.root)
    other = ws.root.parent / "other wt"
    git(ws.root, "worktree", "add", "-q", "-b", "taken", str(other))
    proc = spawn(ws, tmux.name(), "w6", "--branch", "taken")
    assert proc.returncode == 1 and "taken" in proc.stderr
    assert listed(ws.root) == [str(ws.root), str(other)]


def test_a_detached_head_and_a_path_with_spaces_and_a_newline(ws: Workspace, tmux: Tmux) -> None:
    repo = ws.root / "my repo\nx"
    head = make_repo(repo)
    git(repo, "checkout", "-q", "--detach")
    doc = ws.mam_json("spawn", "w7", "--server", tmux.name(), "--cwd", str(repo), "--worktree", "--command",
                      STAND_IN)
    assert doc["worktree"]["base"] == head
    assert doc["worktree"]["path"] == str(repo / ".mam" / "worktrees" / "w7")
    assert Path(doc["worktree"]["path"], "tracked.txt").read_text() == "one\n"


def test_a_bare_repository(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    source = tmp_path / "src"
    make_repo(source)
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(source), str(bare))
    doc = ws.mam_json("spawn", "w8", "--server", tmux.name(), "--cwd", str(bare), "--worktree", "--command",
                      STAND_IN)
    assert Path(doc["worktree"]["path"], "tracked.txt").is_file()
    assert doc["worktree"]["path"] in listed(bare)


def _stopped(ws: Workspace, server: str, name: str) -> Path:
    assert spawn(ws, server, name).returncode == 0
    assert ws.mam("stop", name).returncode == 0
    return ws.root / ".mam" / "worktrees" / name


def test_remove_refuses_and_lists_exactly_what_would_be_lost(ws: Workspace, tmux: Tmux) -> None:
    make_repo(ws.root)
    place = _stopped(ws, tmux.name(), "r1")
    (place / "tracked.txt").write_text("changed\n")
    (place / "new file.txt").write_text("new\n")
    (place / "debug.log").write_text("ignored\n")
    proc = ws.mam("worktree", "remove", "r1")
    assert proc.returncode == 1
    assert "changed: tracked.txt" in proc.stderr and "untracked: new file.txt" in proc.stderr
    assert "debug.log" not in proc.stderr
    assert place.is_dir() and (place / "new file.txt").read_text() == "new\n"
    doc = ws.mam_json("worktree", "remove", "r1", expect=1)
    assert_strict("worktree-remove.json", doc)
    assert doc["removed"] is False and doc["would_lose"]["changed"] == ["tracked.txt"]
    assert doc["would_lose"]["untracked"] == ["new file.txt"]


def test_a_commit_only_a_detached_head_reaches_is_never_removed(ws: Workspace, tmux: Tmux) -> None:
    make_repo(ws.root)
    place = _stopped(ws, tmux.name(), "r2")
    git(place, "checkout", "-q", "--detach")
    git(place, "commit", "-q", "--allow-empty", "-m", "only here")
    lone = git(place, "rev-parse", "HEAD").strip()
    proc = ws.mam("worktree", "remove", "r2")
    assert proc.returncode == 1 and f"commit only here: {lone}" in proc.stderr
    assert place.is_dir()


def test_force_saves_everything_to_a_lost_branch_first(ws: Workspace, tmux: Tmux) -> None:
    make_repo(ws.root)
    place = _stopped(ws, tmux.name(), "r3")
    git(place, "commit", "-q", "--allow-empty", "-m", "on the branch")
    committed = git(place, "rev-parse", "HEAD").strip()
    (place / "tracked.txt").write_text("changed\n")
    (place / "sub dir").mkdir()
    (place / "sub dir" / "new\nline.txt").write_text("new\n")
    doc = ws.mam_json("worktree", "remove", "r3", "--force", "--delete-branch")
    assert_strict("worktree-remove.json", doc)
    assert doc["removed"] is True and doc["branch_deleted"] is True
    saved = doc["saved_to"]
    assert saved.startswith("mam/lost/r3-")
    assert not place.exists()
    assert git(ws.root, "show", f"{saved}:tracked.txt") == "changed\n"
    assert git(ws.root, "show", f"{saved}:sub dir/new\nline.txt") == "new\n"
    assert git(ws.root, "merge-base", "--is-ancestor", committed, saved, check=False) == ""
    assert "mam/r3" not in git(ws.root, "branch", "--list", "mam/r3")


def test_delete_branch_follows_the_same_rule(ws: Workspace, tmux: Tmux) -> None:
    make_repo(ws.root)
    place = _stopped(ws, tmux.name(), "r4")
    git(place, "commit", "-q", "--allow-empty", "-m", "work")
    assert ws.mam("worktree", "remove", "r4", "--delete-branch").returncode == 1
    assert place.is_dir() and git(ws.root, "branch", "--list", "mam/r4").strip()
    # Without --delete-branch the branch keeps the commit: the worktree goes.
    assert ws.mam("worktree", "remove", "r4").returncode == 0
    assert not place.exists() and git(ws.root, "branch", "--list", "mam/r4").strip()
    assert ws.mam("worktree", "remove", "r4", "--delete-branch").returncode == 1
    git(ws.root, "merge", "-q", "--ff-only", "mam/r4")  # now main holds it
    assert ws.mam("worktree", "remove", "r4", "--delete-branch").returncode == 0
    assert not git(ws.root, "branch", "--list", "mam/r4").strip()


def test_a_running_agent_keeps_its_worktree_and_stop_remove_worktree(ws: Workspace, tmux: Tmux) -> None:
    make_repo(ws.root)
    server = tmux.name()
    assert spawn(ws, server, "r5").returncode == 0
    place = ws.root / ".mam" / "worktrees" / "r5"
    assert ws.mam("worktree", "remove", "r5").returncode == 1 and place.is_dir()
    doc = ws.mam_json("stop", "r5", "--remove-worktree")
    assert validator("stop.json").is_valid(doc)
    assert doc["worktree"]["removed"] is True
    assert not place.exists() and row_of(ws, "r5")["status"] == "stopped"


def test_forget_remove_worktree_keeps_the_row_when_work_would_be_lost(ws: Workspace, tmux: Tmux) -> None:
    make_repo(ws.root)
    place = _stopped(ws, tmux.name(), "r6")
    (place / "unsaved.txt").write_text("x\n")
    proc = ws.mam("forget", "r6", "--remove-worktree")
    assert proc.returncode == 1 and "unsaved.txt" in proc.stderr
    assert row_of(ws, "r6") and place.is_dir()
    (place / "unsaved.txt").unlink()
    assert ws.mam("forget", "r6", "--remove-worktree").returncode == 0
    assert not place.exists() and "r6" not in ws.registry.read_text()


def test_forget_remove_worktree_dry_run_says_what_the_real_run_does(ws: Workspace, tmux: Tmux) -> None:
    """A dry run that said `would forget` for a row the real run keeps (work in its worktree) misled: it asks the
    same question, and touches nothing (no lock file, no audit line, the worktree and row as they were)."""
    make_repo(ws.root)
    place = _stopped(ws, tmux.name(), "r7")
    (place / "unsaved.txt").write_text("x\n")
    (ws.root / ".mam" / "worktrees" / ".r7.lock").unlink()
    audit = ws.root / ".mam" / "audit.jsonl"
    before = audit.read_text()
    proc = ws.mam("forget", "r7", "--remove-worktree", "--dry-run")
    assert proc.returncode == 1 and "unsaved.txt" in proc.stderr and "would lose work: untracked" in proc.stderr
    assert "would forget" not in proc.stdout and "nothing would be forgotten" in proc.stderr
    assert row_of(ws, "r7") and (place / "unsaved.txt").is_file() and str(place) in listed(ws.root)
    assert not (ws.root / ".mam" / "worktrees" / ".r7.lock").exists() and audit.read_text() == before
    (place / "unsaved.txt").unlink()
    proc = ws.mam("forget", "r7", "--remove-worktree", "--dry-run")
    assert proc.returncode == 0 and "would forget r7" in proc.stdout
    assert place.is_dir() and row_of(ws, "r7")


def test_forget_of_several_removes_no_worktree_when_one_would_lose_work(ws: Workspace, tmux: Tmux) -> None:
    """`forget A B --remove-worktree` with work in B's worktree: A's clean worktree was removed before B was
    refused, and neither row forgotten (A's then named a worktree that was gone). Now every one is asked first."""
    make_repo(ws.root)
    server = tmux.name()
    clean, dirty = _stopped(ws, server, "a1"), _stopped(ws, server, "b2")
    (dirty / "unsaved.txt").write_text("x\n")
    proc = ws.mam("forget", "a1", "b2", "--remove-worktree")
    assert proc.returncode == 1 and "unsaved.txt" in proc.stderr and "no worktree removed" in proc.stderr
    registered = {r["name"] for r in yaml.safe_load(ws.registry.read_text())["sessions"]}
    assert clean.is_dir() and str(clean) in listed(ws.root) and registered == {"a1", "b2"}
    (dirty / "unsaved.txt").unlink()
    proc = ws.mam("forget", "a1", "b2", "--remove-worktree")
    assert proc.returncode == 0, proc.stderr
    assert not clean.exists() and not dirty.exists() and not yaml.safe_load(ws.registry.read_text())["sessions"]


def test_remove_force_never_saves_into_the_repository_a_rewritten_git_file_names(ws: Workspace, tmux: Tmux,
                                                                                tmp_path: Path) -> None:
    """The worktree's `.git` file rewritten (by anything that may write there) to name another repository: --force
    read its work there, made its mam/lost/ branch there and said the work was saved, then git refused to remove
    it. Now nothing is saved or removed, and the refusal says why."""
    make_repo(ws.root)
    place = _stopped(ws, tmux.name(), "r9")
    other = tmp_path / "other"
    make_repo(other)
    (place / "precious.txt").write_text("work\n")
    (place / ".git").write_text(f"gitdir: {other}/.git\n")
    proc = ws.mam("worktree", "remove", "r9", "--force")
    assert proc.returncode == 1 and "not removed" in proc.stderr and str(other) in proc.stderr, proc.stderr
    assert "saved" not in proc.stderr.split("\n")[0]
    assert git(other, "branch", "--list", "mam/lost/*") == ""
    assert (place / "precious.txt").read_text() == "work\n" and row_of(ws, "r9")


def test_a_row_mam_did_not_sign_never_removes_a_folder(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    """A cloned registry names someone's worktree as mam's: git lists it, but no signature of this user's covers
    the row, so nothing is removed (not even with --force)."""
    make_repo(ws.root)
    victim = tmp_path / "victim"
    git(ws.root, "worktree", "add", "-q", "-b", "theirs", str(victim))
    record = {"path": str(victim), "branch": "theirs", "base": "0" * 40, "repo": str(ws.root), "made_by_mam": True}
    row = {"name": "x1", "backend": "tmux", "server": "s", "status": "stopped",
           "spec": {"command": "sleep 1", "args": [], "cwd": str(victim), "env_names": [], "worktree": record},
           "spec_sig": "hmac-sha256:" + "0" * 64}
    ws.write_registry("version: 1\nsessions:\n- " + json.dumps(row) + "\n")
    for args in (("worktree", "remove", "x1", "--force"), ("forget", "x1", "--remove-worktree")):
        proc = ws.mam(*args)
        assert proc.returncode == 1 and "not as your mam signed it" in proc.stderr
        assert victim.is_dir()


def test_restore_makes_the_worktree_again_from_its_branch(ws: Workspace, tmux: Tmux) -> None:
    make_repo(ws.root)
    server = tmux.name()
    place = _stopped(ws, server, "s1")
    git(place, "commit", "-q", "--allow-empty", "-m", "kept on the branch")
    assert ws.mam("worktree", "remove", "s1").returncode == 0 and not place.exists()
    proc = ws.mam("restore", "s1")
    assert proc.returncode == 0, proc.stderr
    assert place.is_dir() and git(place, "log", "-1", "--format=%s").strip() == "kept on the branch"
    assert tmux.run(server, "list-panes", "-t", "=s1", "-F", "#{pane_current_path}").stdout.strip() == \
        str(place)
    ws.mam("stop", "s1")
    assert ws.mam("worktree", "remove", "s1", "--delete-branch").returncode == 1  # the commit is only there
    git(ws.root, "merge", "-q", "--ff-only", "mam/s1")
    assert ws.mam("worktree", "remove", "s1", "--delete-branch").returncode == 0
    proc = ws.mam("restore", "s1")
    assert proc.returncode == 1 and "both gone" in proc.stdout + proc.stderr


def test_list_and_prune(ws: Workspace, tmux: Tmux) -> None:
    make_repo(ws.root)
    server = tmux.name()
    place = _stopped(ws, server, "l1")
    (place / "a.txt").write_text("a\n")
    listing = ws.mam_json("worktree", "list")
    assert_strict("worktree-list.json", listing)
    entries = {e["name"]: e for e in listing["worktrees"]}
    assert entries["l1"]["state"] == "dirty" and entries["l1"]["uncommitted"] == 1
    assert entries["l1"]["branch"] == "mam/l1" and entries["l1"]["upstream"] is None
    shutil.rmtree(place)
    assert ws.mam_json("worktree", "list")["worktrees"][0]["state"] == "gone"
    doc = ws.mam_json("worktree", "prune")
    assert_strict("worktree-prune.json", doc)
    assert [e["name"] for e in doc["pruned"] if e["pruned"]] == ["l1"]
    assert "worktree" not in row_of(ws, "l1")["spec"]
    assert ws.mam_json("worktree", "list")["worktrees"] == []
    assert str(place) not in listed(ws.root)


def test_concurrent_spawns(ws: Workspace, tmux: Tmux) -> None:
    """Two names at once: both made; one name twice at once: one agent, one worktree, one row."""
    make_repo(ws.root)
    server = tmux.name()
    tmux.run(server, "new-session", "-d", "-s", "keep", "sleep 600")  # up already: no race on its start
    results: dict[str, int] = {}

    def go(key: str, name: str) -> None:
        results[key] = spawn(ws, server, name).returncode

    threads = [threading.Thread(target=go, args=(k, n)) for k, n in (("a", "c1"), ("b", "c2"), ("c", "c3"),
                                                                     ("d", "c3"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results["a"] == 0 and results["b"] == 0
    assert sorted((results["c"], results["d"]))[0] == 0 and sorted((results["c"], results["d"]))[1] != 0
    paths = listed(ws.root)
    for name in ("c1", "c2", "c3"):
        assert str(ws.root / ".mam" / "worktrees" / name) in paths
    assert len(paths) == 4
    assert sum(1 for r in yaml.safe_load(ws.registry.read_text())["sessions"] if r["name"] == "c3") == 1


def test_spawn_and_remove_at_once_leave_no_half(ws: Workspace, tmux: Tmux) -> None:
    """A remove racing a re-spawn of the name: afterwards the row and its folder agree."""
    make_repo(ws.root)
    server = tmux.name()
    place = _stopped(ws, server, "z1")
    out: dict[str, int] = {}
    threads = [threading.Thread(target=lambda: out.update(s=spawn(ws, server, "z1").returncode)),
               threading.Thread(target=lambda: out.update(r=ws.mam("worktree", "remove", "z1").returncode))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    row = row_of(ws, "z1")
    if row["status"] == "running":
        assert place.is_dir() and str(place) in listed(ws.root)
    else:
        assert out["s"] != 0


def test_git_calls_are_pinned() -> None:
    """Every call: git -C DIR with hooks off, no pager, no prompt, the system and global configs unread."""
    from mam.calls.git import PINNED, git_env

    assert "core.hooksPath=/dev/null" in PINNED and "core.pager=cat" in PINNED
    env = git_env({"PATH": "/usr/bin", "GIT_DIR": "/elsewhere", "GIT_WORK_TREE": "/x", "HOME": "/h"})
    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert "GIT_DIR" not in env and "GIT_WORK_TREE" not in env
    assert sys.executable  # the runner is used (bounded, timed): see mam.calls.git.git


def test_a_worktree_with_a_submodule_is_never_removed(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    """Its submodule's git folder lives in the worktree's own git folder, which a removal takes along: refused
    even with --force, which could not save it."""
    make_repo(ws.root)
    sub = tmp_path / "sub"
    make_repo(sub)
    git(ws.root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "sub")
    git(ws.root, "commit", "-q", "-m", "with a submodule")
    place = _stopped(ws, tmux.name(), "m1")
    git(place, "-c", "protocol.file.allow=always", "submodule", "update", "-q", "--init")
    for extra in ((), ("--force",)):
        proc = ws.mam("worktree", "remove", "m1", *extra)
        assert proc.returncode == 1 and "submodule" in proc.stderr, proc.stderr
        assert (place / "sub" / "tracked.txt").is_file()


def test_a_bad_worktree_record_is_an_invalid_registry(ws: Workspace) -> None:
    row = {"name": "b1", "server": "s", "status": "stopped",
           "spec": {"command": "x", "cwd": "/r", "worktree": {"path": "relative", "branch": "b", "base": "c",
                                                              "repo": "/r", "made_by_mam": True}}}
    ws.write_registry("version: 1\nsessions:\n- " + json.dumps(row) + "\n")
    proc = ws.mam("worktree", "list")
    assert proc.returncode == 2 and "spec.worktree.path must be an absolute path" in proc.stderr


def test_a_worktree_that_cannot_be_read_is_unknown_never_clean(ws: Workspace, tmux: Tmux) -> None:
    make_repo(ws.root)
    place = _stopped(ws, tmux.name(), "u1")
    (place / ".git").write_text("gitdir: /nonexistent/nothing\n")  # git can no longer read it
    entry = ws.mam_json("worktree", "list")["worktrees"][0]
    assert entry["state"] == "unknown" and entry["uncommitted"] is None and entry["why"]
    proc = ws.mam("worktree", "remove", "u1", "--force")
    assert proc.returncode == 1 and place.is_dir()


def test_status_shows_each_worktrees_work(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    """Branch, uncommitted files and unpushed commits per worktree; one that cannot be read is unknown."""
    origin = tmp_path / "origin.git"
    make_repo(ws.root)
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(ws.root, "remote", "add", "origin", str(origin))
    server = tmux.name()
    assert spawn(ws, server, "st1").returncode == 0
    assert spawn(ws, server, "st2").returncode == 0
    one = ws.root / ".mam" / "worktrees" / "st1"
    git(one, "push", "-q", "-u", "origin", "mam/st1")
    git(one, "commit", "-q", "--allow-empty", "-m", "unpushed")
    (one / "a.txt").write_text("a\n")
    (one / "tracked.txt").write_text("b\n")
    (ws.root / ".mam" / "worktrees" / "st2" / ".git").write_text("gitdir: /nonexistent\n")
    doc = ws.mam_json("status")
    assert validator("status.json").is_valid(doc)
    work = {s["name"]: s["worktree"] for s in doc["sessions"]}
    assert work["st1"]["state"] == "dirty" and work["st1"]["uncommitted"] == 2 and work["st1"]["unpushed"] == 1
    assert work["st1"]["branch"] == "mam/st1" and work["st1"]["upstream"] == "origin/mam/st1"
    assert work["st1"]["ahead"] == 1  # commits since its base, a count (issue 34, 2)
    assert work["st2"]["state"] == "unknown" and work["st2"]["uncommitted"] is None and work["st2"]["ahead"] is None
    text = ws.mam("status").stdout
    assert "st1: worktree on mam/st1: dirty, 2 uncommitted file(s), 1 commit(s) since its base, 1 unpushed" in text
    assert "st2: worktree on mam/st2: unknown" in text


def test_on_herdr_the_agent_starts_in_its_worktree(ws: Workspace) -> None:
    """Backend-agnostic: the worktree is the directory every backend's start gets (here the fake herdr)."""
    make_repo(ws.root)
    doc = ws.mam_json("spawn", "h1", "--agent", "claude", "--server", "team", "--worktree")
    place = str(ws.root / ".mam" / "worktrees" / "h1")
    assert doc["session"]["cwd"] == place and doc["worktree"]["branch"] == "mam/h1"
    creates = [c["argv"] for c in ws.herdr.calls() if c["argv"][2:4] == ["workspace", "create"]]
    assert creates and place in creates[0]


def test_remove_finds_its_row_as_peek_and_send_do(ws: Workspace) -> None:
    """One lookup of an agent's row (mam.agents.rows.agent_row): an unknown name, a bad --host or --backend are
    said as for `mam peek`, before any git call."""
    proc = ws.mam("worktree", "remove", "nobody")
    assert proc.returncode == 1 and "no registered agent named nobody" in proc.stderr
    assert ws.mam("worktree", "remove", "nobody", "--host", "-oProxyCommand=x").returncode == 2
    unknown = ws.mam("--backend", "nope", "worktree", "remove", "nobody")
    peek = ws.mam("--backend", "nope", "peek", "nobody")
    assert unknown.returncode == peek.returncode == 3 and unknown.stderr == peek.stderr  # no such backend


def test_top_shows_each_worktrees_branch_and_work(ws: Workspace, tmux: Tmux) -> None:
    """Issue 34, 2: `mam top` shows the branch and the work (changed files, commits since the base) beside the
    state; an agent without a worktree shows nothing there, and without any the column is not shown."""
    pytest.importorskip("textual")
    import asyncio

    from test_top_tmux import until
    from textual.widgets import DataTable

    from mam.cli.topview import TopApp
    from mam.live.actions import Actions
    from mam.servers.app import App

    make_repo(ws.root)
    server = tmux.name()
    assert spawn(ws, server, "tw1").returncode == 0
    assert ws.mam("spawn", "plain", "--server", server, "--command", STAND_IN).returncode == 0
    one = ws.root / ".mam" / "worktrees" / "tw1"
    git(one, "commit", "-q", "--allow-empty", "-m", "work")
    (one / "new.txt").write_text("x\n")
    app = TopApp(Actions(App.open(str(ws.root), None, ws.env), [server]), interval=0.2)
    seen: dict[str, str] = {}

    async def scenario() -> None:
        async with app.run_test(size=(180, 30)) as pilot:
            table = app.query_one(DataTable)

            def drawn() -> str:
                return "\n".join(" | ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count))

            await until(pilot, lambda: "mam/tw1" in drawn())
            seen.update({r.name: r.work for r in app.rows})
            seen["headers"] = " ".join(str(c.label) for c in table.columns.values())
            seen["drawn"] = drawn()

    asyncio.run(scenario())
    assert seen["tw1"] == "mam/tw1 1 changed +1" and seen["plain"] == "", seen
    assert "WORK" in seen["headers"].split() and "mam/tw1 1 changed +1" in seen["drawn"], seen


def test_ls_says_each_listed_agents_worktree(ws: Workspace, tmux: Tmux) -> None:
    """Issue 34, 2: `mam ls` shows the branch and work of a listed agent's worktree, in its table and its JSON."""
    make_repo(ws.root)
    server = tmux.name()
    assert spawn(ws, server, "lw1").returncode == 0
    (ws.root / ".mam" / "worktrees" / "lw1" / "x.txt").write_text("x\n")
    doc = ws.mam_json("ls", "--server", server)
    assert validator("ls.json").is_valid(doc)
    assert doc["worktrees"]["lw1"]["state"] == "dirty" and doc["worktrees"]["lw1"]["ahead"] == 0
    text = ws.mam("ls", "--server", server).stdout
    assert "lw1: worktree on mam/lw1: dirty, 1 uncommitted file(s), 0 commit(s) since its base, no upstream" in text
