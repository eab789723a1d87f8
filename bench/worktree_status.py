"""What reading an agent's worktree costs `mam status` and `mam top` (issue 34, 2): per worktree, the one
`git status --porcelain=v2 --branch` mam runs (mam.calls.git, its pinned argv), the `git rev-list --count
BASE..HEAD` that counts `ahead` when HEAD moved, and mam's whole read of one worktree (state_of): HEAD at its
base (one call), HEAD moved and read the first time (two calls), HEAD moved and read again in the same process
(one call: the count is kept). Then W worktrees read in parallel as a status reads them (8 threads at most).

A repository of F tracked files (default 2,000) and W worktrees (default 10) made in a temporary folder; each
figure the median of `--runs` timings, the cases taken in turns.

Run: python3 bench/worktree_status.py [--files 2000] [--worktrees 10] [--runs 30] [--write]. Alone only (not in
run.py). --write puts its section into bench/RESULTS.md and its samples into bench/results.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from common import clean_env, write_section  # noqa: E402

from mam.agents import worktrees  # noqa: E402
from mam.calls.git import git  # noqa: E402

HEADING = "## Worktrees: reading an agent's work"
GIT_ENV = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
STATUS = ["status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all", "--ignore-submodules=none",
          "--no-renames"]


def sh_git(directory: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(directory), *args], env=clean_env(**GIT_ENV), capture_output=True,
                          text=True, timeout=120, check=True, stdin=subprocess.DEVNULL)
    return proc.stdout


def make(root: Path, files: int, count: int) -> tuple[str, list[dict[str, Any]]]:
    """A repository with `files` tracked files and `count` worktrees on their own branches; the base commit and
    each worktree's record (as a row's spec keeps it). The first worktree's HEAD moved by 3 commits."""
    repo = root / "repo"
    repo.mkdir()
    sh_git(repo, "init", "-q", "-b", "main")
    for i in range(files):
        folder = repo / f"d{i % 40}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i}.txt").write_text(f"file {i}\n")
    sh_git(repo, "add", "-A")
    sh_git(repo, "commit", "-q", "-m", "first")
    base = sh_git(repo, "rev-parse", "HEAD").strip()
    records = []
    for n in range(count):
        path = repo / ".mam" / "worktrees" / f"w{n}"
        sh_git(repo, "worktree", "add", "-q", "-b", f"mam/w{n}", str(path), base)
        records.append({"path": str(path), "branch": f"mam/w{n}", "base": base, "repo": str(repo),
                        "made_by_mam": True})
    for i in range(3):
        sh_git(Path(records[0]["path"]), "commit", "-q", "--allow-empty", "-m", f"work {i}")
    (Path(records[1]["path"]) / "d0" / "f0.txt").write_text("changed\n")  # one dirty worktree
    return base, records


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def measure(files: int, count: int, runs: int) -> dict[str, Any]:
    env = clean_env()
    with tempfile.TemporaryDirectory(prefix="mam-bench-wt-") as tmp:
        base, records = make(Path(tmp), files, count)
        moved, still = records[0], records[2]
        head = sh_git(Path(moved["path"]), "rev-parse", "HEAD").strip()

        def first_read() -> None:
            worktrees._COUNTED.clear()  # a fresh process: the count not kept yet
            assert worktrees.state_of(moved, 10, env)["ahead"] == 3

        def all_parallel() -> None:
            with ThreadPoolExecutor(max_workers=min(8, count)) as pool:
                list(pool.map(lambda r: worktrees.state_of(r, 10, env), records))

        cases: dict[str, Callable[[], Any]] = {
            "git status (mam's argv), one worktree": lambda: git(still["path"], STATUS, timeout=10, env=env),
            "git rev-list --count BASE..HEAD": lambda: git(moved["path"], ["rev-list", "--count", f"{base}..{head}"],
                                                           timeout=10, env=env),
            "state_of, HEAD at its base (1 call)": lambda: worktrees.state_of(still, 10, env),
            "state_of, HEAD moved, first read (2 calls)": first_read,
            "state_of, HEAD moved, read again (1 call)": lambda: worktrees.state_of(moved, 10, env),
            f"{count} worktrees in parallel, as a status reads them": all_parallel,
        }
        for fn in cases.values():
            fn()  # warm-up: the files in the page cache
        samples: dict[str, list[float]] = {label: [] for label in cases}
        for _ in range(runs):
            for label, fn in cases.items():
                samples[label].append(timed(fn))
    return {"files": files, "worktrees": count, "runs": runs, "samples": samples,
            "git": subprocess.run(["git", "--version"], capture_output=True, text=True, timeout=10).stdout.strip(),
            "load": os.getloadavg()[0]}


def section(result: dict[str, Any]) -> str:
    import datetime

    rows = [f"| {label} | {statistics.median(values):.1f} | {min(values):.1f} |"
            for label, values in result["samples"].items()]
    return "\n".join([
        f"{HEADING} (`bench/worktree_status.py`, {result['runs']} runs)",
        "",
        f"Measured alone on {datetime.date.today().isoformat()} ({result['git']}, load average "
        f"{result['load']:.2f}): a repository of {result['files']} tracked files, {result['worktrees']} worktrees. "
        "A status makes one `git status` per worktree; `ahead` takes a second call only for a worktree whose HEAD "
        "moved, once per HEAD in a process (`mam top` keeps the count between refreshes).",
        "",
        "| case | median ms | best ms |",
        "|---|---|---|",
        *rows,
        "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--worktrees", type=int, default=10)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--write", action="store_true", help="update bench/RESULTS.md and bench/results.json")
    args = parser.parse_args()
    result = measure(args.files, args.worktrees, args.runs)
    print(section(result))
    if args.write:
        write_section(HEADING, section(result), "worktrees", result)


if __name__ == "__main__":
    main()
