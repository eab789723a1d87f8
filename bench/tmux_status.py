"""`mam --backend tmux status/reconcile --json` over N real tmux servers with 4 agents each, timed in turns
with a shell loop that runs `tmux -N -L S list-sessions -F ...` for each server, and with the same loop run in
parallel.

Run: python3 bench/tmux_status.py [--servers 1 10 50] [--agents 4] [--runs 10]. Servers live on private sockets
under a temporary TMUX_TMPDIR and are killed at the end. The registry is written as mam writes it (spawn does).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from common import clean_env, interleaved, median, write_registry

FORMAT = "#{session_id}\x1f#{session_name}\x1f#{pane_current_path}"
STATUS, RECONCILE = "mam status", "mam reconcile"
SEQUENTIAL, PARALLEL = "shell loop, sequential", "shell loop, parallel"


# What one agent session of a benchmark runs, and the `agent` its row records: (argv after `--`, kind or None).
Agent = Callable[[int], tuple[list[str], str | None]]


def _sleeper(_: int) -> tuple[list[str], str | None]:
    return ["sleep", "3600"], None


@contextmanager
def tmux_servers(servers: int, agents: int, agent: Agent = _sleeper, prefix: str = "bench",
                 settle: float = 0.0, unique: bool = False) -> Iterator[tuple[dict[str, str], str]]:
    """N real tmux servers on private sockets with `agents` sessions each (running what `agent` says), and a
    workspace whose registry (as mam writes it) lists them all; the environment to run mam in, and the
    workspace. `settle`: seconds to let the agents draw their first screen. `unique`: each agent's name holds
    its server's number (`s003-agent-1`), else every server has agent-0... Killed on exit."""
    if shutil.which("mam") is None or shutil.which("tmux") is None:
        raise SystemExit("needs mam (pip install -e .) and tmux")
    tmpdir = tempfile.mkdtemp(prefix="mb", dir="/tmp")  # short: socket paths are limited
    workspace = tempfile.mkdtemp(prefix=f"mam-{prefix}-ws-")
    env = clean_env(TMUX_TMPDIR=tmpdir, MAM_WORKSPACE=workspace, MAM_TMUX_CONFIG="/dev/null")
    names = [f"{prefix}-{i:03d}" for i in range(servers)]
    try:
        rows = []
        for number, server in enumerate(names):
            for a in range(agents):
                argv, kind = agent(a)
                session = f"s{number:03d}-agent-{a}" if unique else f"agent-{a}"
                subprocess.run(["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-s", session,
                                "-x", "120", "-y", "40", "--", *argv], env=env, check=True, timeout=30)
                row = {"name": session, "backend": "tmux", "server": server, "status": "running"}
                if kind is not None:
                    subprocess.run(["tmux", "-L", server, "set-option", "-t", session, "@mam_agent", kind],
                                   env=env, check=True, timeout=30)
                    row["agent"] = kind
                rows.append(row)
        write_registry(workspace, rows)
        time.sleep(settle)
        yield env, workspace
    finally:
        for server in names:
            subprocess.run(["tmux", "-L", server, "kill-server"], env=env, capture_output=True, timeout=30)
        shutil.rmtree(tmpdir, ignore_errors=True)
        shutil.rmtree(workspace, ignore_errors=True)


def measure_one(servers: int, agents: int, runs: int) -> dict[str, list[float]]:
    mam = shutil.which("mam") or "mam"
    names = " ".join(f"bench-{i:03d}" for i in range(servers))
    with tmux_servers(servers, agents) as (env, workspace):
        cases = [
            (STATUS, [mam, "--backend", "tmux", "status", "--json"]),
            (RECONCILE, [mam, "--backend", "tmux", "reconcile", "--json"]),
            (SEQUENTIAL, ["bash", "-c", f'for s in {names}; do tmux -N -L "$s" list-sessions -F "{FORMAT}"; done']),
            (PARALLEL, ["bash", "-c", f'for s in {names}; do tmux -N -L "$s" list-sessions -F "{FORMAT}" & done; '
                                      "wait"]),
        ]
        return interleaved(cases, runs, env, workspace)


def measure(server_counts: list[int], agents: int = 4, runs: int = 10) -> dict[str, Any]:
    return {"runs": runs, "agents": agents,
            "by_servers": {n: measure_one(n, agents, runs) for n in server_counts}}


def table(result: dict[str, Any]) -> str:
    lines = [f"| servers | {STATUS} | {RECONCILE} | {SEQUENTIAL} | {PARALLEL} | status / sequential loop |",
             "|---|---|---|---|---|---|"]
    for n, samples in result["by_servers"].items():
        m = {label: median(s) for label, s in samples.items()}
        lines.append(f"| {n} | {m[STATUS]:.0f} ms | {m[RECONCILE]:.0f} ms | {m[SEQUENTIAL]:.0f} ms | "
                     f"{m[PARALLEL]:.0f} ms | {m[STATUS] / m[SEQUENTIAL]:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    print(table(measure(args.servers, args.agents, args.runs)))


if __name__ == "__main__":
    main()
