"""An agent's own git worktree: made for `mam spawn --worktree`, re-made by restore, and removed only when
nothing would be lost (docs/cli.md, "mam worktree"; docs/trust.md).

Where: `<repository>/.mam/worktrees/NAME`, inside the workspace. mam writes nowhere but in the folder it was asked
to act on (a sibling folder would be a write outside it), `mam` run by the agent in its worktree finds the same
workspace and registry, and `.mam/worktrees/.gitignore` (`*`) keeps the worktrees out of the repository's own
`git status`. Branch: `mam/NAME` unless given.

The no-loss rule: a worktree is removed only when its removal loses nothing: no changed tracked file, no untracked
file that is not ignored, no commit that only its HEAD reaches (no branch, tag or remote-tracking ref that stays
holds it), no initialised submodule (its git folder goes with the worktree). `--force` first commits the whole
state (every change and untracked file, on top of HEAD) to a `mam/lost/NAME-DATE` branch, then removes: even
`--force` loses nothing but ignored files. A worktree with an initialised submodule is never removed by mam.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mam.calls.git import GitResult, git
from mam.calls.route import remote_route
from mam.calls.runner import elsewhere
from mam.registry import LOCK_TIMEOUT, Row, RowKey
from mam.servers.app import App
from mam.util.errors import MamError
from mam.util.quote import shown
from mam.util.safefile import leads_inside, lock_within

FOLDER = ".mam/worktrees"
# The refs a worktree holds of its own (git help worktree, "REFS"): they go with it, as its HEAD does.
OWN_REFS = ("--glob=refs/worktree/*", "--glob=refs/bisect/*", "--glob=refs/rewritten/*")
LOST_PREFIX = "mam/lost/"
KEYS = ("path", "branch", "base", "repo")  # the strings of a spec's `worktree:`; and `made_by_mam`, a boolean


_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a commit id, SHA-1 or SHA-256


def default_branch(name: str) -> str:
    return f"mam/{name}"


def place(repo: str, name: str) -> str:
    return str(Path(repo) / FOLDER / name)


def _git(repo: str, args: list[str], timeout: float, env: Mapping[str, str],
         extra_env: Mapping[str, str] | None = None, stdin: bytes | None = None) -> GitResult:
    return git(repo, args, timeout=timeout, env=env, extra_env=extra_env, stdin=stdin)


def _fail(what: str, result: GitResult, code: str = "operation_failed") -> MamError:
    return MamError(code, f"{what}: {result.why}")


def check_branch(directory: str, branch: str, timeout: float, env: Mapping[str, str]) -> None:
    """A name git takes for a new branch, asked of git itself (`check-ref-format --branch`); bad input else."""
    # `@` and `@{...}` git expands (HEAD, the branch checked out before): the row keeps the words, and a later
    # `git branch -D` of them would delete whatever they name by then.
    if not branch or branch.startswith("-") or not branch.isprintable() or branch.startswith(LOST_PREFIX) \
            or branch == "@" or "@{" in branch or branch == LOST_PREFIX.rstrip("/"):
        raise MamError("usage", f"branch {shown(branch)}: not a branch name mam makes",
                       hint="a name like fix-login (mam/lost/ is where `mam worktree remove --force` saves work)")
    if branch.startswith(("refs/", "heads/", "remotes/")):
        # git would make refs/heads/refs/heads/x, a branch that reads as another ref wherever it is named.
        alone = branch.split("/", 2)[-1] if branch.startswith("refs/") else branch.split("/", 1)[-1]
        raise MamError("usage", f"branch {shown(branch)}: give the branch's name alone, not its ref",
                       hint=f"--branch {shown(alone)}")
    result = _git(directory, ["check-ref-format", "--branch", branch], timeout, env)
    if result.returncode not in (0, None) and result.why.startswith("git exited"):
        raise MamError("usage", f"branch {shown(branch)}: git refuses it as a branch name",
                       hint="see `git help check-ref-format`; e.g. no spaces, no `..`, no trailing `.lock`")
    if not result.ok:
        raise _fail(f"could not ask git about branch {shown(branch)}", result)


def repository(directory: str, timeout: float, env: Mapping[str, str]) -> str:
    """The top folder of the repository `directory` is in (its git folder when it is bare); bad input when it is
    in none."""
    result = _git(directory, ["rev-parse", "--is-bare-repository", "--absolute-git-dir"], timeout, env)
    if not result.ok:
        if result.why.startswith("git exited"):
            raise MamError("usage", f"{directory}: not in a git repository: --worktree needs one",
                           hint="`git init` it, or spawn without --worktree")
        raise _fail(f"could not ask git about {directory}", result)
    bare, git_dir = (result.lines() + ["", ""])[:2]
    if bare == "true":
        return git_dir
    top = _git(directory, ["rev-parse", "--show-toplevel"], timeout, env)
    if not top.ok or not top.lines():
        raise _fail(f"could not find the top folder of the repository of {directory}", top)
    return top.stdout.rstrip("\n")


@dataclass
class Listed:
    """One entry of `git worktree list --porcelain -z`."""

    path: str
    head: str = ""
    branch: str = ""  # refs/heads/... or "" (detached)
    bare: bool = False
    prunable: bool = False


def listed(repo: str, timeout: float, env: Mapping[str, str]) -> list[Listed]:
    result = _git(repo, ["worktree", "list", "--porcelain", "-z"], timeout, env)
    if not result.ok:
        raise _fail(f"could not list the worktrees of {repo}", result)
    entries: list[Listed] = []
    for line in result.stdout.split("\0"):
        word, _, value = line.partition(" ")
        if word == "worktree":
            entries.append(Listed(value))
        elif entries and word == "HEAD":
            entries[-1].head = value
        elif entries and word == "branch":
            entries[-1].branch = value
        elif entries and word == "bare":
            entries[-1].bare = True
        elif entries and word == "prunable":
            entries[-1].prunable = True
    return entries


def _same(a: str, b: str) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


def confined(root: Path) -> Path:
    """`root`'s .mam/worktrees, refused (exit 2) when it or .mam is a symbolic link: a clone can carry one, and
    mam would make the worktree, its lock and .gitignore wherever it points and start the agent there; inside the
    workspace too (`.mam/worktrees -> ../src` would check agents out into src/ and write its `*` .gitignore there,
    hiding the project's new files from git status)."""
    folder = root / FOLDER
    for part in (folder.parent, folder):
        if part.is_symlink():
            inside = leads_inside(folder, root)
            target = shown(os.readlink(part) if inside else os.path.realpath(folder), 200, quote="repr", cut="inside")
            raise MamError("invalid_workspace", f"{part}: a symbolic link leading {'inside' if inside else 'outside'}"
                           f" the workspace (to {target}): mam makes no worktree through a link",
                           hint="remove the link; mam makes .mam/worktrees itself")
    return folder


def confined_there(repo: str, timeout: float, env: Mapping[str, str]) -> None:
    """`confined` on another host, asked of git there (no shell): `.mam/worktrees`, else `.mam`, when there, must
    be a folder of the repository itself (the same git folder); a link leading elsewhere would take the checkout
    with it. Only `rev-parse` runs there, which reads a config and runs nothing of it."""
    own = _git(repo, ["rev-parse", "--absolute-git-dir"], timeout, env)
    if not own.ok:
        raise _fail(f"could not ask git about {repo}", own)
    for folder in (f"{repo}/{FOLDER}", f"{repo}/.mam"):
        found = _git(folder, ["rev-parse", "--absolute-git-dir"], timeout, env)
        if not found.ok and "cannot change to" in found.stderr:
            continue  # not there (yet): git makes it a folder
        if not found.ok or not _same(found.stdout.rstrip("\n"), own.stdout.rstrip("\n")):
            raise MamError("invalid_workspace", f"{folder}: leads outside the repository {repo} (a symbolic link?): "
                           "mam makes no worktree through it", hint="remove the link; mam makes .mam/worktrees itself")
        return


@contextmanager
def name_lock(dot_mam: Path, name: str) -> Iterator[None]:
    """Held by a spawn that makes NAME's worktree and by a remove of it, so neither sees the other half done.
    The file lives in the folder mam makes under .mam/ (opened without following a link)."""
    folder = confined(dot_mam.parent)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / f".{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:  # a clone can carry a file there, or a link as the lock: refused, never followed
        raise MamError("invalid_workspace", f"{folder}: cannot hold the lock of {name}'s worktree: "
                       f"{exc.strerror}", hint="mam makes .mam/worktrees and its .NAME.lock files itself: move "
                       "what is there away") from None
    try:
        # Bounded, as the registry's lock is: a spawn holding it may wait on a question at a terminal for good.
        if not lock_within(fd, LOCK_TIMEOUT):
            raise MamError("operation_failed", f"{name}'s worktree is locked by another mam command (a spawn, "
                           "restore or remove of that name)", hint="retry when the other mam command has finished")
        yield
    finally:
        os.close(fd)


IGNORE_TEXT = b"# mam's agent worktrees (mam spawn --worktree): not part of the repository\n*\n"


def _ignore_folder(repo: str) -> None:
    """`.mam/worktrees/.gitignore` holding `*`: the worktrees never show in the repository's `git status`."""
    folder = Path(repo) / FOLDER
    ignore = folder / ".gitignore"
    folder.mkdir(parents=True, exist_ok=True)
    if not ignore.exists() and not ignore.is_symlink():
        fd = os.open(ignore, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, IGNORE_TEXT)
        finally:
            os.close(fd)


def _ignore_patch() -> bytes:
    """A patch that makes `.mam/worktrees/.gitignore` (IGNORE_TEXT), for `git apply`."""
    lines = IGNORE_TEXT.splitlines(keepends=True)
    name = f"{FOLDER}/.gitignore".encode()
    return (b"diff --git a/" + name + b" b/" + name + b"\nnew file mode 100644\n--- /dev/null\n+++ b/" + name
            + b"\n@@ -0,0 +1," + str(len(lines)).encode() + b" @@\n" + b"".join(b"+" + line for line in lines))


def _ignore_there(repo: str, timeout: float, env: Mapping[str, str]) -> None:
    """The same `.gitignore` on another host, written by git itself through the same transport (no shell, no
    `tee`): `git apply` of a patch that makes the file. git creates it only when nothing is at that name
    (O_EXCL: an existing file or link is left as it is) and refuses a path beyond a symbolic link, which mam
    cannot look at there: then nothing is made (exit 2), as a `.mam` link leading out is refused here."""
    done = _git(repo, ["apply", "--", "-"], timeout, env, stdin=_ignore_patch())
    if done.ok or "already exists in working directory" in done.stderr:
        return
    if "beyond a symbolic link" in done.stderr:
        raise MamError("invalid_workspace", f"{repo}/{FOLDER}: a symbolic link on the way there: mam makes no "
                       "worktree through it", hint="remove the link; mam makes .mam/worktrees itself")
    raise _fail(f"could not write {repo}/{FOLDER}/.gitignore", done)


def make(directory: str, name: str, branch: str, timeout: float, env: Mapping[str, str], *,
         local: bool, registered: Mapping[str, Any] | None = None, created: list[bool] | None = None
         ) -> dict[str, Any]:
    """Make NAME's worktree of the repository of `directory` on `branch` (new from HEAD, or the existing branch)
    and return what the spec keeps. `registered`: the worktree the row of NAME already records (signed), the only
    one that may be reused, and only when it is clean. Bad input (exit 2) before anything is made."""
    check_branch(directory, branch, timeout, env)
    repo = repository(directory, timeout, env)
    if local:
        confined(Path(repo))  # the repository of --cwd has a .mam of its own
    else:
        confined_there(repo, timeout, env)
    target = place(repo, name)
    entries = listed(repo, timeout, env)
    ref = f"refs/heads/{branch}"
    here = next((e for e in entries if e.branch == ref), None)
    at_target = next((e for e in entries if _same(e.path, target)), None)
    if here is not None or at_target is not None:
        return _reuse(here or at_target, branch, target, registered, timeout, env)  # type: ignore[arg-type]
    if _occupied(target, local, timeout, env):
        raise MamError("operation_failed", f"{target}: already there and not a worktree of {repo}: left as it is",
                       hint="move it away, or pick another agent name")
    exists = _git(repo, ["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], timeout, env)
    if local:
        _ignore_folder(repo)
    else:
        _ignore_there(repo, timeout, env)
    if exists.ok:
        base = exists.stdout.strip()
        made = _git(repo, ["worktree", "add", "--", target, branch], timeout, env)
    else:
        head = _git(repo, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], timeout, env)
        if not head.ok:
            raise MamError("usage", f"{repo}: HEAD names no commit yet: a worktree needs one to start from",
                           hint="make a first commit, or give an existing branch to --worktree")
        base = head.stdout.strip()
        made = _git(repo, ["worktree", "add", "-b", branch, "--", target, base], timeout, env)
    if not made.ok:
        _undo(repo, target, None if exists.ok else (branch, base), timeout, env)
        raise _fail(f"could not make the worktree {target} on branch {branch}", made)
    if created is not None:  # made here (not reused), and whether its branch was made too: `unmake` undoes both
        created.append(not exists.ok)
    return {"path": target, "branch": branch, "base": base, "repo": repo, "made_by_mam": True}


def unmake(record: Mapping[str, Any], new_branch: bool, timeout: float, env: Mapping[str, str]) -> None:
    """Undo a `make` whose agent never started (its row could not be claimed): under the name's lock, nothing but
    the checkout is in it. Left as it is when it is no longer as made (then `mam worktree remove` rules)."""
    path, repo = str(record["path"]), str(record["repo"])
    found = losses(path, str(record["branch"]), timeout, env, delete_branch=False)
    if found.nothing:
        _undo(repo, path, (str(record["branch"]), str(record["base"])) if new_branch else None, timeout, env)


def _occupied(path: str, local: bool, timeout: float, env: Mapping[str, str]) -> bool:
    """Whether something (a folder, a file, a link, dangling or not) is at `path`: `git worktree add` would check
    out through a link to an empty folder, wherever it leads. On another host, asked of git there."""
    if local:
        return os.path.lexists(path)
    there = git(path, ["rev-parse", "--absolute-git-dir"], timeout=timeout, env=env, bare=False)
    return there.ok or "cannot change to" not in there.stderr or "No such file" not in there.stderr


def _undo(repo: str, target: str, new_branch: tuple[str, str] | None, timeout: float,
          env: Mapping[str, str]) -> None:
    """A `git worktree add` that failed (a time limit hit mid-checkout) leaves a locked, half-checked-out worktree
    and its new branch, which no row records: every later spawn of the name was refused. Under the name's lock,
    the place was free before: what git lists there is this add's alone, and holds nothing but the checkout."""
    if any(_same(e.path, target) for e in listed(repo, timeout, env)[1:]):
        _git(repo, ["worktree", "remove", "--force", "--force", "--", target], timeout, env)
    if new_branch is not None:  # made by this add at `base`: deleted only while it is still there
        _git(repo, ["update-ref", "-d", f"refs/heads/{new_branch[0]}", new_branch[1]], timeout, env)


def _reuse(entry: Listed, branch: str, target: str, registered: Mapping[str, Any] | None, timeout: float,
           env: Mapping[str, str]) -> dict[str, Any]:
    """A worktree already there for the branch or at NAME's place: reused only when the row of NAME records it
    (signed) and it is clean; refused, saying where it is, else."""
    mine = (registered is not None and _same(str(registered.get("path")), entry.path)
            and registered.get("branch") == branch and _same(entry.path, target))
    if not mine:
        holds = entry.branch.removeprefix("refs/heads/") or "a detached HEAD"
        raise MamError("operation_failed", f"branch {branch} or the place {target} is taken: {entry.path} has "
                       f"{holds} checked out, and no row of this agent records it",
                       hint="pick another branch (--worktree BRANCH) or another agent name")
    found = losses(entry.path, branch, timeout, env, delete_branch=False)
    if found.unreadable or found.changed or found.untracked:
        why = found.unreadable or f"{len(found.changed) + len(found.untracked)} changed or untracked file(s)"
        raise MamError("operation_failed", f"{entry.path}: not clean ({why}): not reused",
                       hint="commit or remove that work, or `mam worktree remove` it (it says what it holds)")
    assert registered is not None
    return dict(registered)


@dataclass
class Losses:
    """What removing a worktree would lose."""

    changed: list[str] = field(default_factory=list)  # tracked files with changes (staged or not)
    untracked: list[str] = field(default_factory=list)  # untracked, not ignored
    commits: list[str] = field(default_factory=list)  # reached from here only: no kept ref holds them
    submodules: list[str] = field(default_factory=list)  # initialised submodules: their git folder goes too
    unreadable: str = ""  # why git could not say: then nothing is removed

    @property
    def nothing(self) -> bool:
        return not (self.changed or self.untracked or self.commits or self.submodules or self.unreadable)

    def as_json(self) -> dict[str, Any]:
        return {"changed": self.changed, "untracked": self.untracked, "commits": self.commits,
                "submodules": self.submodules, "unreadable": self.unreadable or None}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Losses:
        return cls(list(doc.get("changed") or ()), list(doc.get("untracked") or ()), list(doc.get("commits") or ()),
                   list(doc.get("submodules") or ()), str(doc.get("unreadable") or ""))

    def lines(self) -> list[str]:
        out = [f"changed: {p}" for p in self.changed] + [f"untracked: {p}" for p in self.untracked]
        out += [f"commit only here: {c}" for c in self.commits]
        out += [f"submodule with its own git folder: {s}" for s in self.submodules]
        return out + ([f"unreadable: {self.unreadable}"] if self.unreadable else [])


def losses(path: str, branch: str, timeout: float, env: Mapping[str, str], *, delete_branch: bool) -> Losses:
    """What removing the worktree at `path` (and its branch, with `delete_branch`) would lose, read with git."""
    found = Losses()
    status = _git(path, ["status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignore-submodules=none",
                         "--no-renames"], timeout, env)
    if not status.ok:
        found.unreadable = f"git status: {status.why}"
        return found
    for entry in status.stdout.split("\0"):
        if len(entry) < 4:
            continue
        (found.untracked if entry[:2] == "??" else found.changed).append(entry[3:])
    # An untracked folder git shows as one entry, even with --untracked-files=all, is a repository of its own: `git
    # add` would save only a link to its HEAD, and its commits and files would go. Kept, as a submodule is.
    found.submodules = [p for p in found.untracked if p.endswith("/")]
    # Commits HEAD reaches that no ref that stays reaches: every branch (but this one, when it goes), tag and
    # remote-tracking ref. The worktree's own HEAD goes with it; its branch stays unless delete_branch.
    # --exclude before --branches takes the name without refs/heads/ (git help rev-list); check-ref-format
    # keeps glob characters out of a branch's name.
    keep = [f"--exclude={branch}"] if delete_branch else []
    reach = _git(path, ["rev-list", "--max-count=1000", "HEAD", *OWN_REFS, "--not", *keep, "--branches", "--tags",
                        "--remotes"], timeout, env)
    if not reach.ok and _git(path, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], timeout, env).ok:
        found.unreadable = f"git rev-list: {reach.why}"
        return found
    found.commits = reach.lines() if reach.ok else []
    subs = _git(path, ["submodule", "status", "--recursive"], timeout, env)
    if not subs.ok:
        found.unreadable = f"git submodule status: {subs.why}"
        return found
    # A line starts with ' ', '+', 'U' when the submodule is checked out, '-' when it is not.
    found.submodules += [line[1:].split(" ")[1] if " " in line[1:] else line for line in subs.lines()
                         if line and line[0] != "-"]
    return found


INDEX_LIMIT = 1 << 30  # a git index larger than this is no index mam copies


def _copy_index(source: Path, dest: Path) -> None:
    """Copy a worktree's index to mam's private one, neither through a link (a planted link at either would have
    mam read or write elsewhere); a stale private index of an earlier run is replaced."""
    # O_NONBLOCK: a FIFO put there would hold the open until some writer came; it is refused below instead.
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(0, "its index is not a regular file")
        if info.st_size > INDEX_LIMIT:
            raise OSError(0, f"its index is over {INDEX_LIMIT >> 20} MiB")
        try:
            os.unlink(dest)
        except FileNotFoundError:
            pass
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            while chunk := os.read(fd, 1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
        finally:
            os.close(out)
    finally:
        os.close(fd)


def save(path: str, git_dir: str, name: str, timeout: float, env: Mapping[str, str], also: str | None = None) -> str:
    """Commit the worktree's whole state (every change and untracked file that is not ignored, on top of HEAD)
    to a new branch `mam/lost/NAME-DATE`, through a private index in its git folder `git_dir` (own_git_dir): the
    worktree, its index and its branch stay as they were. `also`: a branch about to be deleted, whose tip becomes
    a second parent (HEAD may have moved off it, leaving commits only it holds). Returns the branch."""
    index = {"GIT_INDEX_FILE": f"{git_dir}/mam-save-index"}
    try:
        head = _git(path, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], timeout, env)
        real = Path(git_dir) / "index"
        steps: list[list[str]] = []
        try:
            # From the worktree's own index: a file staged by force that .gitignore names (`git add -f x.log`) is
            # work too, which an index made from HEAD and `add --all` left out, and --force then lost.
            _copy_index(real, Path(index["GIT_INDEX_FILE"]))
        except FileNotFoundError:
            steps.append(["read-tree", "HEAD"] if head.ok else ["read-tree", "--empty"])
        except OSError as exc:
            raise MamError("operation_failed", f"{path}: could not save its work: cannot copy its index: "
                           f"{exc.strerror or exc}") from None
        steps.append(["add", "--all", "--", "."])
        for args in steps:
            done = _git(path, args, timeout, env, index)
            if not done.ok:
                raise _fail(f"{path}: could not save its work", done)
        tree = _git(path, ["write-tree"], timeout, env, index)
        if not tree.ok:
            raise _fail(f"{path}: could not save its work", tree)
    finally:
        try:
            os.unlink(index["GIT_INDEX_FILE"])
        except OSError:
            pass
    parents = ["-p", head.stdout.strip()] if head.ok else []
    tip = _git(path, ["rev-parse", "--verify", "--quiet", f"refs/heads/{also}^{{commit}}"], timeout, env) \
        if also else None
    if tip is not None and tip.ok and tip.stdout.strip() != head.stdout.strip():
        parents += ["-p", tip.stdout.strip()]
    own = _git(path, ["rev-parse", *OWN_REFS], timeout, env)  # go with the worktree: their tips are kept too
    if not own.ok:
        raise _fail(f"{path}: could not read its own refs", own)
    for sha in dict.fromkeys(own.lines()):
        if sha not in parents:
            parents += ["-p", sha]
    who = {"GIT_AUTHOR_NAME": "mam", "GIT_AUTHOR_EMAIL": "mam@localhost", "GIT_COMMITTER_NAME": "mam",
           "GIT_COMMITTER_EMAIL": "mam@localhost"}
    commit = _git(path, ["commit-tree", tree.stdout.strip(), *parents, "-m",
                         f"mam: the work of {name}'s worktree, saved before `mam worktree remove --force`"],
                  timeout, env, who)
    if not commit.ok:
        raise _fail(f"{path}: could not save its work", commit)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    for attempt in range(100):
        branch = f"{LOST_PREFIX}{name}-{stamp}" + (f"-{attempt}" if attempt else "")
        made = _git(path, ["branch", "--", branch, commit.stdout.strip()], timeout, env)
        if made.ok:
            return branch
    raise _fail(f"{path}: could not make a branch for its work", made)


def refuse_unless_listed(record: Mapping[str, Any], timeout: float, env: Mapping[str, str]) -> Listed | None:
    """The entry git lists for the worktree `record` names, which mam may act on only when it is a linked
    worktree (not the main one, not bare) of the recorded repository that mam made; None when git lists no folder
    there any more (or lists it as prunable: its folder is gone)."""
    if record.get("made_by_mam") is not True:
        raise MamError("operation_failed", f"{record.get('path')}: mam did not make this worktree: it never "
                       "removes it", hint="remove it yourself with `git worktree remove`")
    entries = listed(str(record["repo"]), timeout, env)
    entry = next((e for e in entries[1:] if _same(e.path, str(record["path"]))), None)
    if entry is None or entry.prunable:
        return None
    if entry.bare:
        raise MamError("operation_failed", f"{entry.path}: a bare repository, not a worktree mam made")
    return entry


@dataclass
class Removal:
    removed: bool
    losses: Losses
    saved_to: str | None = None
    branch_deleted: bool = False
    gone: bool = False  # the folder was gone already

    def as_json(self) -> dict[str, Any]:
        return {"removed": self.removed, "would_lose": self.losses.as_json(), "saved_to": self.saved_to,
                "branch_deleted": self.branch_deleted, "already_gone": self.gone}


def remove(record: Mapping[str, Any], name: str, timeout: float, env: Mapping[str, str], *, force: bool,
           delete_branch: bool, dry_run: bool = False) -> Removal:
    """Remove the worktree of `record` (a signed spec's `worktree:`) when that loses nothing; with `force`, after
    its work is saved to a mam/lost/ branch. Nothing is removed when git cannot say what it holds, nor when it
    holds a submodule (whose git folder --force could not save). `dry_run`: only read, and say whether it would
    be (`removed`), saving, pruning and removing nothing."""
    entry = refuse_unless_listed(record, timeout, env)
    branch = str(record["branch"])
    repo = str(record["repo"])
    if entry is None:
        found = Losses()
        if delete_branch:
            found.commits = _branch_only(repo, branch, timeout, env)
        return _finish_gone(repo, branch, name, found, timeout, env, force, delete_branch, dry_run)
    git_dir, elsewhere = own_git_dir(entry.path, repo, timeout, env)
    found = Losses(unreadable=elsewhere) if elsewhere else losses(entry.path, branch, timeout, env,
                                                                  delete_branch=delete_branch)
    if delete_branch and not found.unreadable:
        found.commits = sorted(set(found.commits) | set(_branch_only(repo, branch, timeout, env)))
    if not found.nothing and (not force or found.unreadable or found.submodules):
        return Removal(False, found)
    if dry_run:
        return Removal(True, found)
    saved = None if found.nothing else save(entry.path, git_dir, name, timeout, env, branch if delete_branch else None)
    done = _git(repo, ["worktree", "remove", *(["--force"] if saved else []), "--", entry.path], timeout, env)
    if not done.ok:
        raise _fail(f"could not remove the worktree {entry.path}" + (f" (its work is saved in {saved})" if saved
                                                                      else ""), done)
    deleted = delete_branch and _delete_branch(repo, branch, timeout, env)
    return Removal(True, found, saved, deleted)


def own_git_dir(path: str, repo: str, timeout: float, env: Mapping[str, str]) -> tuple[str, str | None]:
    """The git folder git reads the worktree at `path` through, and None; or "" and why it is not one of
    `repo`'s (its `.git` file rewritten, by anything that may write there, to name another repository: its state
    would be read from that repository and --force's save made there, while mam said the work was saved)."""
    here = _git(path, ["rev-parse", "--absolute-git-dir"], timeout, env)
    own = _git(repo, ["rev-parse", "--absolute-git-dir"], timeout, env)
    if not here.ok or not own.ok:
        return "", f"git rev-parse: {(own if here.ok else here).why}"
    found = here.stdout.rstrip("\n")
    # A linked worktree's git folder is REPO_GIT/worktrees/ID.
    if posixpath.basename(posixpath.dirname(found)) != "worktrees" \
            or not _same(posixpath.dirname(posixpath.dirname(found)), own.stdout.rstrip("\n")):
        return "", f"its .git names a git folder not of {repo}: {shown(found, 200, quote='repr', cut='inside')}"
    return found, None


def _branch_only(repo: str, branch: str, timeout: float, env: Mapping[str, str]) -> list[str]:
    """The commits of `branch` no other branch, tag or remote-tracking ref holds."""
    ref = f"refs/heads/{branch}"
    if not _git(repo, ["rev-parse", "--verify", "--quiet", ref], timeout, env).ok:
        return []
    reach = _git(repo, ["rev-list", "--max-count=1000", ref, "--not", f"--exclude={branch}", "--branches", "--tags",
                        "--remotes"], timeout, env)
    if not reach.ok:
        raise _fail(f"could not read branch {branch}", reach)
    return reach.lines()


def _delete_branch(repo: str, branch: str, timeout: float, env: Mapping[str, str]) -> bool:
    # -D: its commits are held elsewhere (checked), or saved to a mam/lost/ branch; git itself still refuses a
    # branch checked out in any worktree.
    return _git(repo, ["branch", "-D", "--", branch], timeout, env).ok


def _finish_gone(repo: str, branch: str, name: str, found: Losses, timeout: float, env: Mapping[str, str],
                 force: bool, delete_branch: bool, dry_run: bool) -> Removal:
    """The folder is gone already: git's record of it is pruned; the branch goes on the same rule. `dry_run`:
    the answer alone."""
    if not dry_run:
        _git(repo, ["worktree", "prune"], timeout, env)
    if found.commits and not force:
        return Removal(False, found, gone=True)
    if dry_run:
        return Removal(True, found, gone=True)
    saved = None
    if found.commits:
        saved = _copy_branch(repo, branch, name, timeout, env)
    deleted = delete_branch and _delete_branch(repo, branch, timeout, env)
    return Removal(True, found, saved, deleted, gone=True)


def _copy_branch(repo: str, branch: str, name: str, timeout: float, env: Mapping[str, str]) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    target = f"{LOST_PREFIX}{name}-{stamp}"
    made = _git(repo, ["branch", "--", target, f"refs/heads/{branch}"], timeout, env)
    if not made.ok:
        raise _fail(f"could not save branch {branch} to {target}", made)
    return target


def remake(record: Mapping[str, Any], timeout: float, env: Mapping[str, str]) -> None:
    """For restore: the worktree of `record` made again on its branch when its folder is gone; refused, saying
    why, when the branch is gone too (or another folder has it checked out)."""
    path, branch, repo = str(record["path"]), str(record["branch"]), str(record["repo"])
    entries = listed(repo, timeout, env)
    if any(_same(e.path, path) and not e.prunable for e in entries):
        return
    _git(repo, ["worktree", "prune"], timeout, env)
    if not _git(repo, ["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}"], timeout, env).ok:
        raise MamError("operation_failed", f"its worktree {path} and its branch {branch} are both gone: nothing to "
                       "start it in", hint="`mam spawn` it again with --worktree, or `mam forget` it")
    # As spawn checks: a pull can bring a link to .mam/worktrees or to the place itself (the folder's `*` ignore
    # keeps no tracked file out), and the checkout, then the agent, would go where it leads.
    local = elsewhere() is None
    if local:
        confined(Path(repo))
    else:
        confined_there(repo, timeout, env)
    if _occupied(path, local, timeout, env):
        raise MamError("operation_failed", f"{path}: something else is there now (a link?): its worktree is not "
                       "made again through it", hint="move it away, then `mam restore` again")
    made = _git(repo, ["worktree", "add", "--", path, branch], timeout, env)
    if not made.ok:
        raise _fail(f"could not make its worktree {path} again on branch {branch}", made)


def signature_of(app: App, row: Row) -> str:
    """What the row's `spec_sig` says of its spec (mam.agents.specsign): `signed` when this user's mam wrote it."""
    from mam.agents import specsign  # start-up: hashlib and the key only when a worktree is acted on

    signature = row.raw.get(specsign.FIELD)
    key = specsign.load_key(app.env) if signature else None
    fields = specsign.row_fields(row.name, row.backend, row.server, row.host, row.agent, row.agent_session)
    return specsign.verdict(key, signature, fields, row.spec or {})


def signed_record(app: App, row: Row) -> dict[str, Any]:
    """The worktree `row`'s spec records, only when this user's mam signed that spec: a row's text may come from a
    clone, and must never point mam at a folder to remove or re-make."""
    record = row.spec.get("worktree") if row.spec is not None else None
    if not isinstance(record, dict):
        raise MamError("usage", f"{row.name}: its row records no worktree (it was not spawned with --worktree)")
    verdict = signature_of(app, row)
    if verdict != "signed":
        raise MamError("operation_failed", f"{row.name}: its row's worktree is not as your mam signed it "
                       f"({verdict}): mam neither removes nor re-makes what it names",
                       hint="remove the worktree yourself with `git worktree remove`")
    return record


def remove_for_row(app: App, row: Row, *, force: bool, delete_branch: bool,
                   dry_run: bool = False) -> tuple[dict[str, Any], Removal]:
    """`mam worktree remove NAME` on the row of NAME: its signed record, where the row's host is, under the lock
    a spawn of the name holds. `dry_run`: the same checks and reading, without the lock file (it writes nothing)."""
    if dry_run:
        confined(app.workspace.dot_mam.parent)  # refused as the real remove would refuse it
    with nullcontext() if dry_run else name_lock(app.workspace.dot_mam, row.name):
        # Read again under the lock: a spawn of the name that held it may have started an agent in it meanwhile.
        fresh = app.load_registry().find(row.key)
        if fresh is None:
            raise MamError("operation_failed", f"{row.name}: its row is gone (another command took it)")
        if fresh.active:
            raise MamError("operation_failed", f"{row.name} is {fresh.status}: its worktree is not removed under it",
                           hint=f"`mam stop {row.name} --remove-worktree` stops it, then removes it")
        record = signed_record(app, fresh)
        with remote_route(app.route(row.host or "")):
            return record, remove(record, row.name, app.timeout, app.backend_env, force=force,
                                  delete_branch=delete_branch, dry_run=dry_run)


def refusal_text(name: str, record: Mapping[str, Any], removal: Removal) -> str:
    """What a refused removal would have lost, one line each: the user reads exactly what stays."""
    why = "git could not say what it holds" if removal.losses.unreadable else "it would lose work"
    lines = [f"{name}: worktree {record.get('path')} (branch {record.get('branch')}) not removed: {why}:",
             *(f"  {line}" for line in removal.losses.lines())]
    if removal.losses.submodules or removal.losses.unreadable:
        lines.append("  --force does not remove it either (it could not save all of that): remove it by hand")
    else:
        lines.append("  commit or push that work, or --force saves it all to a mam/lost/ branch first")
    return "\n".join(lines)


def unread(record: Mapping[str, Any], why: str | None) -> dict[str, Any]:
    """The state of a worktree git could not read (`why`; None: its folder is gone)."""
    return {"state": "gone" if why is None else "unknown", "branch": record.get("branch"), "uncommitted": None,
            "unpushed": None, "upstream": None, "head": None, "moved": None, "ahead": None, "why": why}


def state_of(record: Mapping[str, Any], timeout: float, env: Mapping[str, str]) -> dict[str, Any]:
    """The state of one worktree's work for `mam worktree list` and `mam status`: one git call (`git status
    --porcelain=v2 --branch`); `unknown`, never clean, when it cannot be read."""
    path = str(record.get("path"))
    base = str(record.get("base") or "")
    result = git(path, ["status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all",
                        "--ignore-submodules=none", "--no-renames"], timeout=timeout, env=env,
                 bare=False)  # a worktree is never bare; a folder a row names may be a clone's bare repository
    if not result.ok:
        gone = result.why.startswith("git exited") and "cannot change to" in result.stderr
        return unread(record, None if gone else result.why)
    head, upstream, ahead, files = "", None, None, 0
    for entry in result.stdout.split("\0"):
        if entry.startswith("# branch.oid "):
            head = entry.split(" ", 2)[2]
        elif entry.startswith("# branch.upstream "):
            upstream = entry.split(" ", 2)[2]
        elif entry.startswith("# branch.ab "):
            ahead = int(entry.split(" ")[2].lstrip("+"))
        elif entry and entry[0] in "12u?":
            files += 1
    moved = bool(base) and head != base
    return {"state": "dirty" if files else "clean", "branch": record.get("branch"), "uncommitted": files,
            "unpushed": ahead, "upstream": upstream, "head": head, "moved": moved,
            "ahead": _ahead_of_base(path, base, head, timeout, env) if moved else (0 if base else None), "why": None}


# The counts already made, by (folder, base, head): a commit's id names its ancestry, so the count of BASE..HEAD
# never changes. A live view (`mam top`, one process) then asks git once more per worktree only after a commit;
# bounded, the oldest dropped first.
_COUNTED: dict[tuple[str, str, str], int] = {}
_COUNTED_MOST = 512
_counted_lock = threading.Lock()


def _ahead_of_base(path: str, base: str, head: str, timeout: float, env: Mapping[str, str]) -> int | None:
    """The commits on HEAD since the worktree's base (`git rev-list --count BASE..HEAD`). A second git call, made
    only for a worktree whose HEAD moved and only once per HEAD in a process: `git status` counts against an
    upstream only (git 2.39 has no one call for the work and a count against another commit). None when
    unread."""
    if not _SHA.fullmatch(base) or not _SHA.fullmatch(head):  # a row's base is a commit id; nothing else to git
        return None
    key = (path, base, head)
    with _counted_lock:
        if key in _COUNTED:
            return _COUNTED[key]
    result = git(path, ["rev-list", "--count", f"{base}..{head}", "--"], timeout=timeout, env=env, bare=False)
    text = result.stdout.strip()
    if not (result.ok and text.isdigit()):
        return None
    with _counted_lock:
        _COUNTED[key] = int(text)
        while len(_COUNTED) > _COUNTED_MOST:
            del _COUNTED[next(iter(_COUNTED))]
    return int(text)


def prune_repository(repo: str, timeout: float, env: Mapping[str, str]) -> None:
    """git's own records of worktrees whose folder is gone (`git worktree prune`): it removes no folder."""
    _git(repo, ["worktree", "prune"], timeout, env)


def read_states(app: App, rows: Sequence[Row]) -> Callable[[], dict[RowKey, dict[str, Any]]]:
    """Start reading the work of each row's worktree (one `git status` each, in parallel threads, each within
    the command's time limit) and return the call that waits for them: a status starts them before its
    servers' fan-out and collects them after, so they run beside it. Rows without a worktree cost nothing."""
    chosen = [r for r in rows if r.spec is not None and isinstance(r.spec.get("worktree"), dict)]
    if not chosen:
        return dict
    from concurrent.futures import ThreadPoolExecutor  # start-up: only when a row has a worktree

    def read(row: Row) -> dict[str, Any]:
        record = (row.spec or {}).get("worktree") or {}
        with remote_route(app.route(row.host or "")):
            return state_of(record, app.timeout, app.backend_env)

    pool = ThreadPoolExecutor(max_workers=min(8, len(chosen)))
    futures = {row.key: pool.submit(read, row) for row in chosen}
    pool.shutdown(wait=False)
    # All of them within the one time limit, as a server's query is: a registry (a clone's) can hold any number
    # of rows naming a folder where git is slow, and 8 at a time would add a limit per 8 rows.
    deadline = time.monotonic() + app.timeout + 1

    def collect() -> dict[RowKey, dict[str, Any]]:
        found: dict[RowKey, dict[str, Any]] = {}
        for row in chosen:
            try:
                found[row.key] = futures[row.key].result(max(0.0, deadline - time.monotonic()))
            except MamError as exc:  # a host that cannot be reached: unknown, never clean
                found[row.key] = unread((row.spec or {}).get("worktree") or {}, exc.message)
            except TimeoutError:  # not begun (cancelled) or still running (ends within its own limit)
                futures[row.key].cancel()
                found[row.key] = unread((row.spec or {}).get("worktree") or {},
                                        f"not read within {app.timeout:g}s, with the other worktrees")
        return found

    return collect
