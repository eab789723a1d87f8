"""Cold start-up of the mam command: fresh processes of `mam --help`, `mam version` and `mam status --json` on
an empty registry, beside `python -c pass` (the interpreter's own floor) and the `--help` of a bare one-command
typer app on the same interpreter (bench/bare_typer.py: what typer itself costs), timed in turns.

Run: python3 bench/startup.py [--runs 20]. Prints a Markdown table and the modules the status path imports.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import clean_env, interleaved, median

FLOOR = "python -c pass (interpreter floor)"
BARE = "bare one-command typer app --help"
HELP = "mam --help"
VERSION = "mam version"
STATUS = "mam status --json (empty registry)"
BARE_APP = Path(__file__).resolve().parent / "bare_typer.py"


def status_modules(env: dict[str, str], cwd: str) -> list[str]:
    """The top-level packages `mam status --json` imports beyond the interpreter's own start-up."""
    code = ("import sys, runpy\nsys.argv = ['mam', 'status', '--json']\n"
            "before = set(sys.modules)\n"
            "try:\n    runpy.run_module('mam', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "mods = sorted({m.split('.')[0] for m in set(sys.modules) - before})\n"
            "sys.stderr.write('MODULES ' + ' '.join(mods))\n")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=60)
    return proc.stderr.rsplit("MODULES ", 1)[-1].split()


def measure(runs: int = 20) -> dict[str, Any]:
    # The mam of this interpreter, beside it, as the bare app runs on it: not a wrapper found first on PATH.
    mam = shutil.which("mam", path=str(Path(sys.executable).parent)) or shutil.which("mam")
    if mam is None:
        raise SystemExit("mam is not installed: pip install -e .")
    workspace = tempfile.mkdtemp(prefix="mam-bench-")
    env = clean_env(MAM_WORKSPACE=workspace)
    cases = [
        (FLOOR, [sys.executable, "-c", "pass"]),
        ("python -S -c pass (no site)", [sys.executable, "-S", "-c", "pass"]),
        (BARE, [sys.executable, str(BARE_APP), "--help"]),
        (HELP, [mam, "--help"]),
        (VERSION, [mam, "version"]),
        (STATUS, [mam, "status", "--json"]),
    ]
    try:
        samples = interleaved(cases, runs, env, workspace)
        return {"runs": runs, "samples": samples, "modules": status_modules(env, workspace)}
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


def table(result: dict[str, Any]) -> str:
    floor = median(result["samples"][FLOOR])
    bare = median(result["samples"][BARE])
    lines = [f"| command | median of {result['runs']} cold runs | above the interpreter floor | / bare typer app |",
             "|---|---|---|---|"]
    for label, samples in result["samples"].items():
        ms = median(samples)
        lines.append(f"| `{label}` | {ms:.0f} ms | {ms - floor:+.0f} ms | {ms / bare:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    result = measure(parser.parse_args().runs)
    print(table(result))
    print("\nTop-level packages the status path imports (beyond the interpreter's own start-up):")
    print(" ".join(result["modules"]))


if __name__ == "__main__":
    main()
