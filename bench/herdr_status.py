"""`mam status --json` over N fake herdr servers (tests/fakes/herdr) whose every call takes 50 ms, timed in turns
with a shell loop that makes the same `herdr --session S agent list` calls one after another, and with the same
loop run in parallel (the most any client could get out of this machine).

Wall time should grow with N / parallelism, not with N: mam asks every server at once.

Run: python3 bench/herdr_status.py [--servers 1 10 50] [--delay 0.05] [--runs 7].
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import FAKES, clean_env, interleaved, median, write_registry

STATUS, SEQUENTIAL, PARALLEL = "mam status", "shell loop, sequential", "shell loop, parallel"


def _listening(path: Path) -> bool:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        sock.close()


def measure_one(servers: int, agents: int, delay: float, runs: int) -> dict[str, list[float]]:
    mam = shutil.which("mam")
    if mam is None:
        raise SystemExit("mam is not installed: pip install -e .")
    config = tempfile.mkdtemp(prefix="mh", dir="/tmp")  # short: socket paths are limited
    workspace = tempfile.mkdtemp(prefix="mam-bench-ws-")
    # The fake first on PATH, run by this interpreter (no wrapper script in between).
    path = os.pathsep.join([FAKES, os.path.dirname(sys.executable), os.environ.get("PATH", "/usr/bin:/bin")])
    env = clean_env(XDG_CONFIG_HOME=config, MAM_WORKSPACE=workspace, PATH=path)
    names = [f"bench-{i:03d}" for i in range(servers)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        rows = []
        for server in names:
            directory = Path(config, "herdr", "sessions", server)
            directory.mkdir(parents=True)
            listed = [{"agent": "claude", "agent_status": "idle", "focused": False, "name": f"agent-{a}",
                       "pane_id": f"w1:p{a}", "revision": 0, "state_change_seq": 0, "tab_id": "w1:t1",
                       "terminal_id": f"term_{a}", "workspace_id": "w1"} for a in range(agents)]
            (directory / "agents.json").write_text(json.dumps(listed))
            rows += [{"name": f"agent-{a}", "backend": "herdr", "server": server, "status": "running"}
                     for a in range(agents)]
            procs.append(subprocess.Popen([os.path.join(FAKES, "herdr"), "--session", server, "server"], env=env,
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True))
        for server in names:
            deadline = time.monotonic() + 30
            while not _listening(Path(config, "herdr", "sessions", server, "herdr.sock")):
                if time.monotonic() > deadline:
                    raise SystemExit(f"fake herdr server {server} did not come up")
                time.sleep(0.02)
        write_registry(workspace, rows)
        slow = {**env, "FAKE_HERDR_DELAY": str(delay)}
        words = " ".join(names)
        cases = [
            (STATUS, [mam, "--backend", "herdr", "status", "--json"]),
            (SEQUENTIAL, ["bash", "-c", f'for s in {words}; do herdr --session "$s" agent list; done']),
            (PARALLEL, ["bash", "-c", f'for s in {words}; do herdr --session "$s" agent list & done; wait']),
        ]
        return interleaved(cases, runs, slow, workspace)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(config, ignore_errors=True)
        shutil.rmtree(workspace, ignore_errors=True)


def measure(server_counts: list[int], agents: int = 4, delay: float = 0.05, runs: int = 7) -> dict[str, Any]:
    return {"runs": runs, "agents": agents, "delay_ms": delay * 1000,
            "by_servers": {n: measure_one(n, agents, delay, runs) for n in server_counts}}


def growth(result: dict[str, Any]) -> tuple[float, float]:
    """From the fewest to the most servers: how much mam's wall time grew, and how much the sequential loop's
    grew (what it would be if mam asked one server after another)."""
    counts = sorted(result["by_servers"])
    first, last = result["by_servers"][counts[0]], result["by_servers"][counts[-1]]
    return (median(last[STATUS]) - median(first[STATUS]),
            median(last[SEQUENTIAL]) - median(first[SEQUENTIAL]))


def table(result: dict[str, Any]) -> str:
    lines = [f"| servers | {STATUS} | {SEQUENTIAL} | {PARALLEL} | mam / sequential loop |", "|---|---|---|---|---|"]
    for n, samples in result["by_servers"].items():
        m, seq, par = (median(samples[label]) for label in (STATUS, SEQUENTIAL, PARALLEL))
        lines.append(f"| {n} | {m:.0f} ms | {seq:.0f} ms | {par:.0f} ms | {m / seq:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    result = measure(args.servers, 4, args.delay, args.runs)
    print(table(result))
    grew, loop_grew = growth(result)
    print(f"\nmam grew {grew:.0f} ms where the sequential loop grew {loop_grew:.0f} ms")


if __name__ == "__main__":
    main()
