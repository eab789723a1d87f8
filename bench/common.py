"""Helpers the benchmarks share: a clean environment, and timing commands side by side.

Commands that are compared are timed interleaved (A, B, C, A, B, C, ...), so a machine that gets busier or
quieter during a run shifts every case alike and the ratios between them stay honest.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

LEAKY = ("MAM_", "CLAUDE", "CODEX_", "TMUX", "HERDR_", "ZELLIJ", "WORKSPACE_ROOT")
FAKES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fakes")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without anything that could point mam or a multiplexer elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LEAKY)}
    env.update(extra)
    return env


def run_ms(argv: Sequence[str], env: Mapping[str, str], cwd: str, limit: float = 300) -> float:
    """Wall time of one process, in ms. Not subprocess.run(timeout=...): with a timeout, Popen.wait polls with
    sleeps that double up to 50 ms, so a 35 ms process reads as 64 ms. A blocking wait sees the exit at once; a
    timer kills a process that outlives `limit`."""
    started = time.perf_counter()
    proc = subprocess.Popen(list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    watchdog = threading.Timer(limit, proc.kill)
    watchdog.start()
    code = proc.wait()
    elapsed = (time.perf_counter() - started) * 1000
    watchdog.cancel()
    if code != 0:
        # Said with its reason: run once more, untimed, with stderr kept (a pipe would change the timing above).
        again = subprocess.run(list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=limit)
        raise RuntimeError(f"{' '.join(argv)} exited {code} (-9: killed after {limit:g} s); run again, it "
                           f"exited {again.returncode}: {again.stderr.strip()[-2000:]}")
    return elapsed


def interleaved(cases: Sequence[tuple[str, Sequence[str]]], runs: int, env: Mapping[str, str],
                cwd: str) -> dict[str, list[float]]:
    """`runs` wall times, in ms, of each case's fresh process, taken in turns; one untimed warm-up each."""
    for _, argv in cases:
        run_ms(argv, env, cwd)
    samples: dict[str, list[float]] = {label: [] for label, _ in cases}
    for _ in range(runs):
        for label, argv in cases:
            samples[label].append(run_ms(argv, env, cwd))
    return samples


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def write_registry(workspace: str, rows: list[dict[str, Any]]) -> None:
    """The workspace's registry holding `rows`, written as mam writes it (spawn does)."""
    from mam.registry import text as registry_text  # the form mam's own writes leave

    os.makedirs(os.path.join(workspace, ".mam"), exist_ok=True)
    Path(workspace, ".mam", "agent-sessions.yaml").write_text(registry_text.dump({"version": 1, "sessions": rows}))


def write_section(heading: str, section: str, key: str, result: dict[str, Any]) -> None:
    """`section` (which starts with `heading`) into bench/RESULTS.md in place of an earlier one, or at its end,
    and `result` into bench/results.json under `key`: for a benchmark that runs alone with --write."""
    import json

    bench = Path(__file__).resolve().parent
    path = bench / "RESULTS.md"
    text = path.read_text() if path.exists() else "# Results\n"
    if heading in text:
        head, _, rest = text.partition(heading)
        tail = rest.split("\n## ", 1)
        text = head + section + ("\n## " + tail[1] if len(tail) > 1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)
    data_path = bench / "results.json"
    data = json.loads(data_path.read_text()) if data_path.exists() else {}
    data[key] = result
    data_path.write_text(json.dumps(data, indent=1) + "\n")
