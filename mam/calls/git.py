"""mam's own calls of git: an explicit argv, a time limit, bounded output (mam.calls.runner), here or on the host
the calls of this context go to (mam.calls.route), and pinned so that the repository decides nothing.

Every call is `git -C DIR -c ... SUBCOMMAND ...`: `core.hooksPath=/dev/null` (so `git worktree add` runs no
post-checkout hook of the repository's, nor any other), no pager, no prompt for a password, no fsmonitor daemon
the repository names, no colours, and the system and global configs are not read (GIT_CONFIG_NOSYSTEM,
GIT_CONFIG_GLOBAL=/dev/null): the user's aliases or `status.showUntrackedFiles=no` must not change what mam sees.
The repository's own `.git/config` is read (git gives no switch for it); the options pinned with `-c` win over it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mam.calls.runner import elsewhere, run
from mam.plugin.records import CommandResult

# The options every call pins; `-c` wins over every config file.
PINNED = ("-c", "core.hooksPath=/dev/null", "-c", "core.pager=cat", "-c", "core.fsmonitor=false",
          "-c", "color.ui=false", "-c", "core.quotePath=false", "-c", "advice.detachedHead=false",
          "-c", "status.showUntrackedFiles=all")
# What git gets of the environment: enough to find itself and the user, nothing that points it elsewhere.
KEPT = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "LOGNAME")
# What a remote login may have set that would point git elsewhere: unset on the host (`env -u`).
UNSET = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_NAMESPACE",
         "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT")


def git_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of mam's git calls: `env`'s PATH and the like only (a GIT_DIR or GIT_WORK_TREE of the
    caller's would point git at another repository), and the switches that keep git from asking or paging."""
    kept = {k: env[k] for k in KEPT if k in env}
    kept.update({"GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "PAGER": "cat", "GIT_CONFIG_NOSYSTEM": "1",
                 "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_OPTIONAL_LOCKS": "0", "GIT_ASKPASS": "",
                 "SSH_ASKPASS": "", "LC_ALL": "C"})
    return kept


@dataclass(frozen=True)
class GitResult:
    ok: bool
    stdout: str
    stderr: str
    returncode: int | None
    why: str  # when not ok: one line saying what went wrong

    def lines(self, sep: str = "\n") -> list[str]:
        return [part for part in self.stdout.split(sep) if part]


def _why(result: CommandResult) -> str:
    if result.transport_error is not None:
        return result.transport_error.message
    if result.not_found:
        return "git is not installed (or not on PATH)"
    if result.timed_out:
        return f"git timed out after {result.timeout:g}s"
    if result.os_error:
        return result.os_error
    said = (result.stderr.strip().splitlines() or [""])[-1][:300]
    return f"git exited {result.returncode}" + (f": {said}" if said else "")


# For a folder only a row names (a clone's registry can): git finds no bare repository there by itself. A clone
# can carry one (files named HEAD, config, objects/), and its `config` may name a filter that `git status` runs.
NO_BARE = ("-c", "safe.bareRepository=explicit")


def git(directory: str, args: Sequence[str], *, timeout: float, env: Mapping[str, str],
        extra_env: Mapping[str, str] | None = None, bare: bool = True, stdin: bytes | None = None) -> GitResult:
    """`git -C directory PINNED args`, `directory` and every argument passed as one argv word each. `bare`
    False: a bare repository at `directory` is refused (NO_BARE), for a folder the user did not name. `stdin`:
    bytes git reads (a patch for `git apply -`), then end of file."""
    argv = ["git", "-C", directory, *PINNED, *(() if bare else NO_BARE), *args]
    environment = git_env(env)
    environment.update(extra_env or {})
    if elsewhere() is not None:
        # Over ssh, `env` reaches only the local ssh client: the same switches are set on the host, in the
        # command, and the variables that would point git at another repository unset there.
        unset = [word for name in UNSET for word in ("-u", name)]
        pinned = [f"{k}={v}" for k, v in environment.items() if k not in KEPT or k == "LC_ALL"]
        argv = ["env", *unset, *pinned, *argv]
    result = run(argv, timeout=timeout, env=environment, stdin=stdin)
    ok = result.returncode == 0 and result.transport_error is None
    return GitResult(ok, result.stdout, result.stderr, result.returncode, "" if ok else _why(result))
