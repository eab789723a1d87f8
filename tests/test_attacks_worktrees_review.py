"""An attacker's review of the worktree feature (issue 34; docs/trust.md, "A worktree's work is never lost" and "A
registry never points mam at a folder"): each test here failed on the code before its fix.

Real git on repositories made here, real tmux on private sockets; HOME is the test's own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_attacks_trust4_worktrees import _bare_repository_with_a_filter
from test_worktrees import git, listed, make_repo

from conftest import Tmux, Workspace
from mam.agents import worktrees
from mam.util.errors import MamError

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


def test_restore_with_consent_never_makes_a_worktree_a_clones_row_names(ws: Workspace, tmux: Tmux,
                                                                        tmp_path: Path) -> None:
    """`mam restore --trust-spec` consents to the argv, cwd and env it shows; a clone's row also carrying a
    `worktree:` record made mam run `git worktree add` in the repository it names (here a bare repository the
    clone carries, whose config names a filter git runs at checkout) into a folder it names, outside the
    workspace, and signed that record as this user's."""
    make_repo(ws.root)
    marker = tmp_path / "PWNED"
    planted = _bare_repository_with_a_filter(ws.root / "vendor", marker)
    with (planted / "config").open("a") as config:  # and one git runs at checkout
        config.write(f'\tsmudge = "touch {marker} && cat"\n')
    (planted / "refs" / "heads" / "other").write_text((planted / "refs" / "heads" / "main").read_text())
    outside = tmp_path / "outside" / "x1"
    server = tmux.name()
    record = {"path": str(outside), "branch": "other", "base": "0" * 40, "repo": str(planted), "made_by_mam": True}
    row = {"name": "x1", "backend": "tmux", "server": server, "status": "stopped",
           "spec": {"command": "sleep 600", "args": [], "cwd": str(outside), "env_names": [], "worktree": record}}
    ws.write_registry("version: 1\nsessions:\n- " + json.dumps(row) + "\n")
    proc = ws.mam("restore", "x1", "--trust-spec")
    assert not outside.exists(), proc.stdout + proc.stderr
    assert not marker.exists()
    assert "worktrees" not in os.listdir(planted)
    assert proc.returncode == 1 and "not a directory any more" in proc.stdout
    assert tmux.run(server, "has-session", "-t", "=x1", check=False).returncode != 0


def test_consent_never_signs_a_clones_worktree_record_as_mams(ws: Workspace, tmux: Tmux, tmp_path: Path) -> None:
    """Consenting to a row's argv signed its `worktree:` too: `mam worktree remove` then acted on a worktree of
    another repository that mam never made."""
    other = tmp_path / "other"
    make_repo(other)
    theirs = tmp_path / "theirs"
    git(other, "worktree", "add", "-q", "-b", "theirs", str(theirs))  # the user's own worktree, clean
    server = tmux.name()
    record = {"path": str(theirs), "branch": "theirs", "base": "0" * 40, "repo": str(other), "made_by_mam": True}
    row = {"name": "x1", "backend": "tmux", "server": server, "status": "stopped",
           "spec": {"command": "sleep 600", "args": [], "cwd": str(theirs), "env_names": [], "worktree": record}}
    ws.write_registry("version: 1\nsessions:\n- " + json.dumps(row) + "\n")
    proc = ws.mam("restore", "x1", "--trust-spec")
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the argv and cwd consented to run
    assert ws.mam("stop", "x1", "--server", server).returncode == 0
    proc = ws.mam("worktree", "remove", "x1")
    assert proc.returncode == 2 and "records no worktree" in proc.stderr, proc.stdout + proc.stderr
    assert str(theirs) in listed(other) and theirs.is_dir()


def test_a_worktree_add_that_times_out_leaves_nothing_half_made(repo: Path) -> None:
    """A checkout slower than the time limit (a big repository; here a slow filter of the test's own config) left
    a locked, half-checked-out worktree and its new branch that no row records: every later spawn of the name
    was refused ("taken"), and `mam worktree remove` had no row to act on."""
    (repo / ".gitattributes").write_text("tracked.txt filter=slow\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "slow")
    git(repo, "config", "filter.slow.smudge", "sleep 20; cat")
    with pytest.raises(MamError, match="timed out"):
        worktrees.make(str(repo), "p", "mam/p", 2, ENV, local=True)
    assert listed(repo) == [str(repo)]
    assert not (repo / ".mam" / "worktrees" / "p").exists()
    assert git(repo, "branch", "--list", "mam/p") == ""
    git(repo, "config", "--unset", "filter.slow.smudge")
    record = worktrees.make(str(repo), "p", "mam/p", 30, ENV, local=True)  # the name is free again
    assert Path(record["path"]).is_dir()


# Runs `mam restore` with a `mam worktree remove` of the same name let in between the worktree's re-making and
# the claim of its row (the remove runs to its end, or for at most 8 s while it waits for the name's lock).
_BETWEEN = """
import subprocess, sys
from mam.agents import restoreplan
claimed = restoreplan._restore_claimed
def between(*args, **kwargs):
    try:
        subprocess.run([sys.executable, "-m", "mam", "worktree", "remove", "s1"], timeout=8)
    except subprocess.TimeoutExpired:
        pass
    return claimed(*args, **kwargs)
restoreplan._restore_claimed = between
sys.argv = ["mam", "restore", "s1"]
from mam.entry import main
main()
"""


def test_a_remove_never_takes_the_worktree_a_restore_just_made_again(ws: Workspace, tmux: Tmux) -> None:
    """restore held the name's lock only while it re-made the worktree: a `mam worktree remove` of the name
    between that and the claim of the row removed the folder, and the agent started in a folder that was gone."""
    make_repo(ws.root)
    server = tmux.name()
    place = ws.root / ".mam" / "worktrees" / "s1"
    assert ws.mam("spawn", "s1", "--server", server, "--worktree", "--command", "sleep 600").returncode == 0
    assert ws.mam("stop", "s1").returncode == 0
    assert ws.mam("worktree", "remove", "s1").returncode == 0 and not place.exists()
    proc = subprocess.run([sys.executable, "-c", _BETWEEN], env=ws.env, cwd=ws.root, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert place.is_dir() and str(place) in listed(ws.root)
    assert tmux.run(server, "list-panes", "-t", "=s1", "-F", "#{pane_current_path}").stdout.strip() == str(place)
    ws.mam("stop", "s1")


@pytest.mark.parametrize("planted", ["file", "linked_lock"])
def test_what_a_clone_carries_at_the_lock_is_bad_input_not_an_internal_error(ws: Workspace, tmux: Tmux,
                                                                            tmp_path: Path, planted: str) -> None:
    """A clone can track `.mam/worktrees` as a file, or `.mam/worktrees/.NAME.lock` as a link: spawn ended in
    "internal error" (exit 1, "report it") instead of saying what is in the way."""
    make_repo(ws.root)
    folder = ws.root / ".mam" / "worktrees"
    folder.parent.mkdir(exist_ok=True)
    target = tmp_path / "target"
    if planted == "file":
        folder.write_text("not a folder\n")
    else:
        folder.mkdir()
        (folder / ".w1.lock").symlink_to(target)
    server = tmux.name()
    proc = ws.mam("spawn", "w1", "--server", server, "--worktree", "--command", "sleep 600")
    assert proc.returncode == 2, proc.stderr
    assert "internal error" not in proc.stderr and str(folder) in proc.stderr
    assert not target.exists() and listed(ws.root) == [str(ws.root)]
    assert tmux.run(server, "has-session", "-t", "=w1", check=False).returncode != 0


@pytest.mark.parametrize("branch", ["refs/heads/x", "heads/x", "remotes/origin/x"])
def test_a_branch_given_as_a_ref_is_refused_with_its_name(repo: Path, branch: str) -> None:
    """`--branch refs/heads/x` made a branch named `refs/heads/x` (its ref refs/heads/refs/heads/x), which git
    then reads as another ref wherever it is named."""
    with pytest.raises(MamError, match="not its ref") as refused:
        worktrees.make(str(repo), "p", branch, 30, ENV, local=True)
    alone = {"refs/heads/x": "x", "heads/x": "x", "remotes/origin/x": "origin/x"}[branch]
    assert refused.value.code == "usage" and refused.value.hint == f"--branch '{alone}'"
    assert listed(repo) == [str(repo)] and git(repo, "branch", "--format=%(refname:short)").split() == ["main"]


@pytest.mark.parametrize("branch", ["@{-1}", "@", "mam/lost"])
def test_a_branch_name_git_expands_is_refused(repo: Path, branch: str) -> None:
    """`git check-ref-format --branch` takes `@{-1}` (the branch checked out before) and `@` (HEAD): the row
    kept the words, and `--delete-branch` later ran `git branch -D -- @{-1}`, deleting whatever branch the
    repository had checked out before by then, with commits only it held. A branch `mam/lost` made every
    `--force` of the repository fail: no `mam/lost/NAME-DATE` can sit beside it."""
    git(repo, "checkout", "-q", "-b", "old")
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "old")  # @{-1} names a branch that is gone: `worktree add -b` makes it
    with pytest.raises(MamError, match="not a branch name mam makes") as refused:
        worktrees.make(str(repo), "p", branch, 30, ENV, local=True)
    assert refused.value.code == "usage"
    assert listed(repo) == [str(repo)] and git(repo, "branch", "--format=%(refname:short)").split() == ["main"]


def test_a_held_name_lock_is_waited_for_within_a_bound(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock of a name's worktree was waited for without end: a spawn holding it while it asks a question at a
    terminal froze every `mam worktree remove` and `mam restore` of that name, silently."""
    monkeypatch.setattr(worktrees, "LOCK_TIMEOUT", 0.5, raising=False)
    dot_mam = repo / ".mam"
    with worktrees.name_lock(dot_mam, "w1"):
        done: list[BaseException | None] = []

        def other() -> None:
            try:
                with worktrees.name_lock(dot_mam, "w1"):
                    done.append(None)
            except MamError as exc:
                done.append(exc)

        waiter = threading.Thread(target=other, daemon=True)
        waiter.start()
        waiter.join(10)
        assert done and isinstance(done[0], MamError) and "locked by another mam command" in str(done[0])
    waiter.join(30)


@pytest.mark.parametrize("force", [False, True])
def test_a_commit_only_a_worktrees_own_ref_holds_is_never_lost(repo: Path, force: bool) -> None:
    """refs/worktree/*, refs/bisect/* and refs/rewritten/* belong to one worktree and go with it (git help
    worktree): a commit only such a ref held counted as held by nothing, and went with a plain `remove`."""
    record = worktrees.make(str(repo), "p", "mam/p", 30, ENV, local=True)
    place = Path(record["path"])
    git(place, "checkout", "-q", "--detach")
    git(place, "commit", "-q", "--allow-empty", "-m", "kept by a ref of this worktree only")
    kept = git(place, "rev-parse", "HEAD").strip()
    git(place, "update-ref", "refs/bisect/bad", kept)
    git(place, "checkout", "-q", "mam/p")
    removal = worktrees.remove(record, "p", 30, ENV, force=force, delete_branch=False)
    assert removal.losses.commits == [kept]
    if not force:
        assert not removal.removed and str(place) in listed(repo)
    else:
        assert removal.removed and removal.saved_to
        assert kept in git(repo, "rev-list", removal.saved_to).split()


def test_a_registry_full_of_slow_worktrees_keeps_status_within_its_time_limit(ws: Workspace) -> None:
    """`mam status` reads each row's worktree, 8 at a time, each within MAM_TIMEOUT: a clone's registry with
    many rows naming a folder where git is slow (here the test's own slow filter) added a whole time limit for
    every 8 rows. All of them now share the one limit; a row not read within it is `unknown`, saying so."""
    make_repo(ws.root)
    (ws.root / ".gitattributes").write_text("tracked.txt filter=slow\n")
    git(ws.root, "add", "-A")
    git(ws.root, "commit", "-q", "-m", "slow")
    git(ws.root, "config", "filter.slow.clean", "sleep 30; cat")
    os.utime(ws.root / "tracked.txt", (978307200, 978307200))  # not what the index says: git runs the filter
    record = {"path": str(ws.root), "branch": "main", "base": "0" * 40, "repo": str(ws.root), "made_by_mam": True}
    rows = [json.dumps({"name": f"x{i}", "backend": "tmux", "server": "s", "status": "stopped",
                        "spec": {"command": "sleep 1", "args": [], "cwd": str(ws.root), "env_names": [],
                                 "worktree": record}}) for i in range(160)]
    ws.write_registry("version: 1\nsessions:\n" + "".join(f"- {row}\n" for row in rows))
    env = {**ws.env, "MAM_TIMEOUT": "1"}
    started = time.monotonic()
    proc = ws.mam("status", "--json", env=env, timeout=120)
    took = time.monotonic() - started
    states = [s["worktree"] for s in json.loads(proc.stdout)["sessions"]]
    assert len(states) == 160 and {s["state"] for s in states} == {"unknown"}
    assert any("not read within 1s" in s["why"] for s in states)
    assert took < 15, took  # 160 rows, 8 at a time, 1 s each: 20 s and more before


def test_a_spawn_whose_row_cannot_be_written_leaves_no_worktree(ws: Workspace, tmux: Tmux) -> None:
    """The worktree is made before the row is claimed: a claim refused (here a read-only registry) left the
    worktree and its branch with no row, and every later spawn of the name was refused ("taken")."""
    make_repo(ws.root)
    ws.write_registry("version: 1\nsessions: []\n")
    ws.registry.chmod(0o444)
    server = tmux.name()
    proc = ws.mam("spawn", "w1", "--server", server, "--worktree", "--command", "sleep 600")
    assert proc.returncode == 1 and "read-only" in proc.stderr, proc.stderr
    assert listed(ws.root) == [str(ws.root)] and git(ws.root, "branch", "--list", "mam/w1") == ""
    ws.registry.chmod(0o644)
    proc = ws.mam("spawn", "w1", "--server", server, "--worktree", "--command", "sleep 600")
    assert proc.returncode == 0, proc.stderr
    assert ws.mam("stop", "w1").returncode == 0


@pytest.mark.parametrize("where", ["place", "folder"])
def test_restore_never_makes_the_worktree_again_through_a_link(repo: Path, tmp_path: Path, where: str) -> None:
    """Spawn refuses a link at `.mam/worktrees` (or the place) leading out; restore's re-making did not check:
    a pull can bring such a link (the folder's `*` ignore keeps no tracked file out), and `git worktree add`
    checked the branch out through it, into an empty folder anywhere, where the agent then started."""
    record = worktrees.make(str(repo), "p", "mam/p", 30, ENV, local=True)
    assert worktrees.remove(record, "p", 30, ENV, force=False, delete_branch=False).removed
    outside = tmp_path / "outside"
    outside.mkdir()
    if where == "place":
        Path(record["path"]).symlink_to(outside)
    else:
        shutil.rmtree(repo / ".mam" / "worktrees")
        (repo / ".mam" / "worktrees").symlink_to(outside)
    with pytest.raises(MamError):
        worktrees.remake(record, 30, ENV)
    assert list(outside.iterdir()) == [] and listed(repo) == [str(repo)]


def test_the_index_copy_refuses_a_fifo_or_a_link_at_once(tmp_path: Path) -> None:
    """`worktree remove --force` copies the worktree's index before it saves: a FIFO there held the open until
    some writer came (for good), a link would have it read elsewhere; each is refused at once, nothing made."""
    fifo, link, dest = tmp_path / "fifo", tmp_path / "link", tmp_path / "mam-save-index"
    os.mkfifo(fifo)
    link.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_bytes(b"DIRC")
    for source in (fifo, link):
        with pytest.raises(OSError):
            worktrees._copy_index(source, dest)
        assert not dest.exists()
