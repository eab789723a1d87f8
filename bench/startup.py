"""Cold start-up of the mam command: median of N fresh processes per command, beside `python -c pass`.

Run: python3 bench/startup.py [--runs 10]. Prints a Markdown table and the modules the status path imports.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def median_ms(argv: list[str], runs: int, env: dict[str, str], cwd: str) -> float:
    """Median wall time, in ms, of `runs` fresh processes of argv."""
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                       timeout=120)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    mam = shutil.which("mam")
    if mam is None:
        sys.exit("mam is not installed: pip install -e .")
    workspace = tempfile.mkdtemp(prefix="mam-bench-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAM_", "CLAUDE", "WORKSPACE_ROOT"))}
    env["MAM_WORKSPACE"] = workspace
    cases = [
        ("python -c pass (interpreter floor)", [sys.executable, "-c", "pass"]),
        ("python -S -c pass (no site)", [sys.executable, "-S", "-c", "pass"]),
        ("mam --help", [mam, "--help"]),
        ("mam version", [mam, "version"]),
        ("mam status --json (empty registry)", [mam, "status", "--json"]),
    ]
    for _, argv in cases:  # warm the page cache once
        subprocess.run(argv, env=env, cwd=workspace, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=60)
    print(f"| command | median of {args.runs} cold runs |")
    print("|---|---|")
    for label, argv in cases:
        print(f"| `{label}` | {median_ms(argv, args.runs, env, workspace):.0f} ms |")
    code = ("import sys, runpy\nsys.argv = ['mam', 'status', '--json']\n"
            "before = set(sys.modules)\n"
            "try:\n    runpy.run_module('mam', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "mods = sorted({m.split('.')[0] for m in set(sys.modules) - before})\n"
            "sys.stderr.write('MODULES ' + ' '.join(mods))\n")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=workspace, capture_output=True, text=True,
                          timeout=60)
    print()
    print("Top-level packages the status path imports (beyond the interpreter's own start-up):")
    print(proc.stderr.rsplit("MODULES ", 1)[-1])
    shutil.rmtree(workspace, ignore_errors=True)


if __name__ == "__main__":
    main()
