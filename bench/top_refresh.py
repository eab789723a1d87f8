"""What `mam top` costs per refresh: the poller of the live view (mam.live.topmodel.Poller with mam top's own actions,
one `mam status --server S` call per server, each in its own thread) over N real tmux servers whose panes run
stand-in agents (one working, redrawing, per server), timed inside one process as the view runs it. Beside it,
one `mam --backend tmux status --json` process over the same fleet, for scale.

Per refresh: wall time (from asking to the last answer), the CPU time of the mam process (every thread), and
the CPU time of the tmux clients it ran (its children). The view itself only reads a snapshot under a lock and
redraws; that is not measured here.

Run: python3 bench/top_refresh.py [--servers 10] [--agents 5] [--runs 10] [--write].
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from common import interleaved, median, write_section
from state_status import servers_with_agents

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "backends")]


def refresh_costs(env: dict[str, str], workspace: str, runs: int) -> dict[str, list[float]]:
    from mam.live.actions import Actions
    from mam.live.topmodel import Poller
    from mam.servers.app import App

    actions = Actions(App.open(workspace, "tmux", env))
    answered = threading.Semaphore(0)

    def fetch(group: Any) -> Any:
        try:
            return actions.fetch(group)
        finally:
            answered.release()

    poller = Poller(actions.registered, fetch, patience=60)
    samples: dict[str, list[float]] = {"wall_ms": [], "cpu_ms": [], "children_cpu_ms": [], "calls": []}
    for run in range(runs + 1):
        before, cpu, children = time.perf_counter(), time.process_time(), os.times()
        calls = poller.calls
        for _ in range(poller.refresh()):
            # Woken by each answer: a loop of 1 ms sleeps took the interpreter's lock from the 100 calls of a
            # refresh at 1,000 agents a thousand times a second, and tripled the CPU time measured.
            answered.acquire()
        while poller.busy():  # the last answer's bookkeeping, a moment after its fetch returned
            time.sleep(0.0005)
        rows, _ = poller.snapshot()
        after = os.times()
        if run == 0:
            continue  # the first refresh loads the plugins and the rules: the view pays it once
        samples["wall_ms"].append((time.perf_counter() - before) * 1000)
        samples["cpu_ms"].append((time.process_time() - cpu) * 1000)
        samples["children_cpu_ms"].append((after.children_user + after.children_system
                                           - children.children_user - children.children_system) * 1000)
        samples["calls"].append(poller.calls - calls)
        assert len(rows) == len(poller.registered()), "every registered agent has a row"
    return samples


def measure(servers: int = 10, agents: int = 5, runs: int = 10) -> dict[str, Any]:
    with servers_with_agents(servers, agents) as (env, workspace):
        top = refresh_costs(env, workspace, runs)
        # This checkout's mam, as the in-process poller above runs it (not whichever `mam` is first on PATH).
        here = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "backends")])}
        status = interleaved([("mam status", [sys.executable, "-m", "mam", "--backend", "tmux", "status", "--json"])],
                             runs, here, workspace)
    return {"servers": servers, "agents": servers * agents, "top": top, "status_ms": status["mam status"]}


HEADING = "## mam top, one refresh"


def section(result: dict[str, Any], alone: bool = False) -> str:
    """Its part of RESULTS.md: one refresh of the live view beside one whole `mam status` process."""
    import datetime

    top = result["top"]
    note = [f"Measured alone by `python3 bench/top_refresh.py --write` on {datetime.date.today().isoformat()}; "
            f"the machine's load average was {result.get('load', '?')} as it ended.", ""]
    return "\n".join([
        f"{HEADING} over {result['agents']} agents on {result['servers']} tmux servers "
        f"(`bench/top_refresh.py`, {len(top['wall_ms'])} runs)",
        "",
        *(note if alone else []),
        "| per refresh | median | min | max |",
        "|---|---:|---:|---:|",
        *(f"| {label} | {median(top[key]):.1f} ms | {min(top[key]):.1f} ms | {max(top[key]):.1f} ms |"
          for label, key in (("wall", "wall_ms"), ("CPU of mam (every thread)", "cpu_ms"),
                             ("CPU of the tmux calls", "children_cpu_ms"))),
        f"| server calls | {median(top['calls']):.0f} | {min(top['calls']):.0f} | {max(top['calls']):.0f} |",
        "",
        f"Beside it, one whole `mam --backend tmux status --json` process over the same fleet: "
        f"{median(result['status_ms']):.1f} ms wall (start-up included; the view pays start-up once).",
        "",
    ])


def write(result: dict[str, Any]) -> None:
    """This section into RESULTS.md (in place of an earlier one), the samples into results.json."""
    write_section(HEADING, section(result, True), "top", result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--agents", type=int, default=5, help="per server")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--write", action="store_true", help="update bench/RESULTS.md and bench/results.json")
    args = parser.parse_args()
    import signal
    import subprocess

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still kills its tmux servers
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "mam"), str(ROOT / "backends")],
                   check=True, timeout=120)
    result = measure(args.servers, args.agents, args.runs)
    result["load"] = f"{os.getloadavg()[0]:.1f}"
    print(section(result))
    if args.write:
        write(result)


if __name__ == "__main__":
    main()
