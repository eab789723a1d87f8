"""Where the time of `mam --backend tmux status --json` goes, phase by phase, in a fresh process per run.

Run: python3 bench/profile_status.py [--servers 50] [--runs 7]. A child process times each phase of the status
command with perf_counter (imports, workspace and registry, plugin manager and entry points, the listing of
every server in parallel, the JSON document) and prints them; the parent reports the medians beside the
interpreter's own start-up, timed in the same way.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

from common import median, run_ms
from tmux_status import tmux_servers

CHILD = r"""
import time
t0 = time.perf_counter()
import json, sys
from mam.servers.app import App
from mam.servers.availability import resolve_explicit_backend
from mam.servers.fanout import call_context
from mam.agents.rows import session_entry
from mam.servers.fanout import query_servers
t1 = time.perf_counter()
app = App.open(None, "tmux")
reg = app.load_registry()
t2 = time.perf_counter()
resolve_explicit_backend(app)
app.plugins.backend("tmux")
ctx = call_context(app)
t3 = time.perf_counter()
outcomes = query_servers(app.plugins, {r.server_key for r in reg.rows}, ctx)
t4 = time.perf_counter()
doc = {"servers": [o.as_json() for o in outcomes.values()],
       "sessions": [session_entry(r, outcomes.get(r.server_key)) for r in reg.rows]}
json.dumps(doc, indent=2)
t5 = time.perf_counter()
assert all(o["state"] == "up" for o in doc["servers"])
print(json.dumps([t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4]))
"""
PHASES = ("imports (status path)", "workspace, config and registry", "plugin manager, entry points, tmux backend",
          "listing every server (threads)", "the JSON document")


def measure(servers: int = 50, runs: int = 7) -> dict[str, Any]:
    with tmux_servers(servers, 4) as (env, workspace):
        floor = [run_ms([sys.executable, "-c", "pass"], env, workspace) for _ in range(runs)]
        phases: list[list[float]] = [[] for _ in PHASES]
        for _ in range(runs):
            out = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=workspace, capture_output=True,
                                 text=True, check=True, timeout=120)
            for i, seconds in enumerate(json.loads(out.stdout)):
                phases[i].append(seconds * 1000)
    return {"servers": servers, "runs": runs, "floor": floor, "phases": dict(zip(PHASES, phases, strict=True))}


def table(result: dict[str, Any]) -> str:
    lines = [f"| phase of `mam --backend tmux status --json`, {result['servers']} servers | median of "
             f"{result['runs']} |", "|---|---|",
             f"| interpreter start-up (`python -c pass`) | {median(result['floor']):.0f} ms |"]
    lines += [f"| {phase} | {median(samples):.1f} ms |" for phase, samples in result["phases"].items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", type=int, default=50)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    print(table(measure(args.servers, args.runs)))


if __name__ == "__main__":
    main()
