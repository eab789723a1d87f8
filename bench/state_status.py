"""What agent state costs: `mam --backend tmux status --json` (reading every agent's state: one capture call
per server) beside `status --no-state --json`, timed in turns in one run, over N real tmux servers whose panes
run stand-in agents (tests/agents/standin.py) drawing a mix of screens: working (redrawing its spinner),
blocked, idle and garbage.

Run: python3 bench/state_status.py [--servers 10] [--agents 5] [--runs 10] [--write]. --write puts its section
into bench/RESULTS.md (replacing an earlier one) and its samples into bench/results.json, without running the
other benchmarks.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from common import interleaved, median, write_section
from tmux_status import tmux_servers

BENCH = Path(__file__).resolve().parent
STANDIN = str(BENCH.parent / "tests" / "agents" / "standin.py")
WITH, WITHOUT = "mam status (with state)", "mam status --no-state"
# One working agent per server: it redraws every 0.2 s, as a busy agent does, and costs CPU as one does.
SCREENS = [("claude", "working"), ("codex", "blocked"), ("claude", "idle"), ("gemini", "idle"), ("generic", "garbage")]
TARGET = 1.30  # state may add at most 30% to status
HEADING = "## Agent state"


def _standin(a: int) -> tuple[list[str], str | None]:
    kind, state = SCREENS[a % len(SCREENS)]
    return [sys.executable, STANDIN, kind, state], kind


def servers_with_agents(servers: int, agents: int) -> Any:
    """tmux_status's servers, each agent a stand-in drawing its kind's screen (one working, redrawing)."""
    return tmux_servers(servers, agents, _standin, prefix="state", settle=1.0)


def states_seen(env: dict[str, str], workspace: str) -> dict[str, int]:
    """How many agents read as each state: the benchmark measures real verdicts, not failures."""
    mam = shutil.which("mam") or "mam"
    out = subprocess.run([mam, "--backend", "tmux", "status", "--json"], env=env, cwd=workspace, check=True,
                         capture_output=True, text=True, timeout=60).stdout
    counts: dict[str, int] = {}
    for session in json.loads(out)["sessions"]:
        counts[session["state"]] = counts.get(session["state"], 0) + 1
    return dict(sorted(counts.items()))


def measure(servers: int = 10, agents: int = 5, runs: int = 10) -> dict[str, Any]:
    mam = shutil.which("mam") or "mam"
    with servers_with_agents(servers, agents) as (env, workspace):
        seen = states_seen(env, workspace)
        cases = [(WITH, [mam, "--backend", "tmux", "status", "--json"]),
                 (WITHOUT, [mam, "--backend", "tmux", "status", "--no-state", "--json"])]
        samples = interleaved(cases, runs, env, workspace)
    import os

    return {"servers": servers, "agents": agents, "runs": runs, "states": seen, "samples": samples,
            "load": round(os.getloadavg()[0], 1)}


def ratio(result: dict[str, Any]) -> float:
    return median(result["samples"][WITH]) / median(result["samples"][WITHOUT])


def target(result: dict[str, Any]) -> tuple[str, str, bool]:
    n = result["servers"] * result["agents"]
    with_ms, without_ms = median(result["samples"][WITH]), median(result["samples"][WITHOUT])
    return (f"state adds at most 30% to status ({n} tmux agents on {result['servers']} servers)",
            f"{with_ms:.0f} ms vs {without_ms:.0f} ms (+{(ratio(result) - 1) * 100:.0f}%)", ratio(result) <= TARGET)


def table(result: dict[str, Any]) -> str:
    m = {label: median(s) for label, s in result["samples"].items()}
    states = ", ".join(f"{count} {state}" for state, count in result["states"].items())
    return "\n".join([
        f"| agents | servers | {WITH} | {WITHOUT} | with / without |",
        "|---|---|---|---|---|",
        f"| {result['servers'] * result['agents']} | {result['servers']} | {m[WITH]:.0f} ms | {m[WITHOUT]:.0f} ms | "
        f"{ratio(result):.2f}x |",
        "",
        f"States read: {states}.",
    ])


def section(result: dict[str, Any], alone: bool = False) -> str:
    name, measured, met = target(result)
    import datetime

    note = [f"Measured alone by `python3 bench/state_status.py --write` on {datetime.date.today().isoformat()}, "
            f"not in the full run above; the machine's load average was {result.get('load', '?')} as it ended "
            "(other jobs ran beside it), so compare the two columns, timed in turns, rather than the absolute "
            "times.", ""]
    return "\n".join([
        f"{HEADING} (`bench/state_status.py`, {result['runs']} runs)",
        "",
        *(note if alone else []),
        f"Target: {name}: {measured}, {'met' if met else '**missed**'}.",
        "",
        table(result),
        "",
    ])


def write(result: dict[str, Any]) -> None:
    """This section into RESULTS.md (in place of an earlier one), the samples into results.json."""
    write_section(HEADING, section(result, True), "state", result)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--agents", type=int, default=5)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--write", action="store_true", help="update bench/RESULTS.md and bench/results.json")
    args = parser.parse_args()
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still kills its tmux servers
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(BENCH.parent / "mam"),
                    str(BENCH.parent / "backends")], check=True, timeout=120)
    result = measure(args.servers, args.agents, args.runs)
    print(section(result))
    if args.write:
        write(result)
    sys.exit(0 if target(result)[2] else 1)


if __name__ == "__main__":
    main()
