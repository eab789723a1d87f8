"""What the hook path costs (docs/hooks.md).

1. `mam report idle`, as an agent's hook runs it inside its turn, through the entry point the installed `mam`
   command uses (`mam.entry:main`), beside the bare interpreter (`python -c pass`) and `mam version` (the
   full command line: typer loaded); plus the modules the report imports and the bytes of their compiled
   bytecode.
2. What state costs status at N agents: `mam --backend tmux status --json` over real tmux servers of stand-in
   agents (bench/state_status.py's mix), without hook reports, with a fresh report for every agent (read,
   checked against the pane's pid and activity), and `--no-state`, timed in turns.

Run: python3 bench/hook_report.py [--runs 20] [--servers 10] [--agents 5] [--skip-status]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import clean_env, interleaved, median

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
ENTRY = "import sys; from mam.entry import main; main()"  # what the installed `mam` script runs
BARE, REPORT, VERSION = "python -c pass", "mam report idle", "mam version"
NO_REPORTS, REPORTS, NO_STATE = "status, no hook reports", "status, a report per agent", "status --no-state"


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), str(ROOT / "backends"), os.environ.get("PYTHONPATH", "")) if p)
    return clean_env(PYTHONPATH=path, **extra)


def report_cost(runs: int) -> dict[str, Any]:
    workspace = tempfile.mkdtemp(prefix="mam-hook-ws-")
    env = _env(MAM_AGENT="bench", MAM_WORKSPACE=workspace, TMUX_PANE="%1")
    cases = [(BARE, [sys.executable, "-c", "pass"]),
             (REPORT, [sys.executable, "-c", ENTRY, "report", "idle"]),
             (VERSION, [sys.executable, "-c", ENTRY, "version"])]
    samples = interleaved(cases, runs, env, workspace)
    written = json.loads((Path(workspace) / ".mam" / "reports" / "bench.json").read_text())
    assert written["state"] == "idle"
    # The modules `mam report` loads beyond the interpreter's own start-up, and their compiled size.
    probe = ("import sys; before = set(sys.modules); from mam.entry import main\n"
             "try:\n    main(['report', 'idle'])\nexcept SystemExit:\n    pass\n"
             "print('\\n'.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=workspace, capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    mam_modules = [m for m in out if m == "mam" or m.startswith("mam.")]
    pyc = 0
    for name in mam_modules:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            cached = Path(importlib.util.cache_from_source(spec.origin))
            pyc += cached.stat().st_size if cached.exists() else 0
    return {"runs": runs, "samples": samples, "modules": out, "mam_modules": mam_modules, "pyc_bytes": pyc}


def _write_reports(env: dict[str, str], workspace: str, into: str) -> int:
    """A fresh `mam report idle` for every agent of `workspace`'s registry, written into workspace `into`, as
    each agent's hook would write it from inside its pane."""
    doc = json.loads(subprocess.run([sys.executable, "-m", "mam", "--backend", "tmux", "status", "--no-state",
                                     "--json"], env=env, cwd=workspace, capture_output=True, text=True,
                                    check=True, timeout=60).stdout)
    folder = Path(into) / ".mam" / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    for session in doc["sessions"]:
        pid = subprocess.run(["tmux", "-L", session["server"], "display", "-p", "-t", session["pane_id"],
                              "#{pane_pid}"], env=env, capture_output=True, text=True, timeout=30).stdout.strip()
        (folder / f"{session['name']}.json").write_text(json.dumps(
            {"schema": 1, "agent": session["name"], "state": "idle", "time": time.time(),
             "panes": {"TMUX_PANE": session["pane_id"]}, "pids": [int(pid)]}))
    return len(doc["sessions"])


def status_cost(servers: int, agents: int, runs: int) -> dict[str, Any]:
    """The three cases timed in turns: the same servers, the same registry, in two workspaces, one of them
    with a report per agent."""
    import shutil

    from state_status import _standin
    from tmux_status import tmux_servers

    mam = [sys.executable, "-c", ENTRY, "--backend", "tmux"]
    with tmux_servers(servers, agents, _standin, prefix="hook", settle=1.0, unique=True) as (env, workspace):
        env = {**env, **{"PYTHONPATH": _env()["PYTHONPATH"]}}
        reported = tempfile.mkdtemp(prefix="mam-hook-reported-")
        try:
            shutil.copytree(Path(workspace) / ".mam", Path(reported) / ".mam")
            _write_reports(env, workspace, reported)
            sources = json.loads(subprocess.run([*mam, "--workspace", reported, "status", "--json"], env=env,
                                                cwd=workspace, capture_output=True, text=True, check=True,
                                                timeout=60).stdout)
            seen: dict[str, int] = {}
            for session in sources["sessions"]:
                seen[session["state_source"]] = seen.get(session["state_source"], 0) + 1
            cases = [(NO_STATE, [*mam, "status", "--no-state", "--json"]),
                     (NO_REPORTS, [*mam, "status", "--json"]),
                     (REPORTS, [*mam, "--workspace", reported, "status", "--json"])]
            samples = interleaved(cases, runs, env, workspace)
        finally:
            shutil.rmtree(reported, ignore_errors=True)
    return {"servers": servers, "agents": agents, "runs": runs, "sources_with_reports": seen, "samples": samples}


HEADING = "## The hook path"


def write(text: str) -> None:
    """`text` as this benchmark's section of RESULTS.md, in place of an earlier one (run.py rewrites the file
    without it: run this again after it)."""
    path = BENCH / "RESULTS.md"
    old = path.read_text() if path.exists() else "# Results\n"
    if HEADING in old:
        head, _, rest = old.partition(HEADING)
        tail = rest.split("\n## ", 1)
        old = head.rstrip("\n") + "\n\n" + ("## " + tail[1] if len(tail) > 1 else "")
    path.write_text(old.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--agents", type=int, default=5)
    parser.add_argument("--skip-status", action="store_true")
    parser.add_argument("--write", action="store_true", help="put the numbers into bench/RESULTS.md")
    args = parser.parse_args()
    import datetime

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "mam"), str(ROOT / "backends")],
                   check=True, timeout=120)
    cost = report_cost(args.runs)
    m = {label: median(s) for label, s in cost["samples"].items()}
    lines = [f"{HEADING} (`bench/hook_report.py`, {cost['runs']} runs)", "",
             f"Measured alone on {datetime.date.today().isoformat()}, load average {os.getloadavg()[0]:.1f} (other "
             "jobs ran beside it: compare the columns, timed in turns, rather than the absolute times).", "",
             f"| {BARE} | {REPORT} | {VERSION} | report over bare |", "|---|---|---|---|",
             f"| {m[BARE]:.1f} ms | {m[REPORT]:.1f} ms | {m[VERSION]:.1f} ms | +{m[REPORT] - m[BARE]:.1f} ms |", "",
             f"`mam report` loads {len(cost['mam_modules'])} of mam's modules ({', '.join(cost['mam_modules'])}), "
             f"{cost['pyc_bytes']:,} bytes of compiled bytecode, and {len(cost['modules']) - len(cost['mam_modules'])}"
             " others.", ""]
    if not args.skip_status:
        status = status_cost(args.servers, args.agents, args.runs)
        s = {label: median(v) for label, v in status["samples"].items()}
        n = status["servers"] * status["agents"]
        lines += [f"State at {n} agents on {status['servers']} tmux servers ({status['runs']} runs each, in turns):",
                  "", f"| {NO_STATE} | {NO_REPORTS} | {REPORTS} |", "|---|---|---|",
                  f"| {s[NO_STATE]:.0f} ms | {s[NO_REPORTS]:.0f} ms | {s[REPORTS]:.0f} ms |", "",
                  f"Sources with a report per agent, just written: {status['sources_with_reports']} (as the runs go "
                  "on, the reports of the working agents give way to their screens, which keep changing).", ""]
    text = "\n".join(lines)
    print(text)
    if args.write:
        write(text)


if __name__ == "__main__":
    main()
