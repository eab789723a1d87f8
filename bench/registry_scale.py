"""A registry of 10,000 rows over 100 servers, with a fast in-memory backend: load and validate, reconcile, and a
`reconcile --apply` that changes every tenth row (1,000 of 10,000); wall time (median of N), the Python heap's
peak (tracemalloc) and the whole process's peak RSS (a fresh process per step). Then the cost of one registry
write as the file grows.

Each step runs on the file in two forms: as a person writes it (YAML, read by PyYAML) and as mam writes it
(one JSON row per line, read without the YAML parser).

Run: python3 bench/registry_scale.py [--rows 10000] [--servers 100] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import median

from mam import registry
from mam.commands.reconcile import reconcile_document
from mam.plugin.records import Agent, BackendSpec, BootstrapResult, CallContext, Failure, ServerError
from mam.plugin.spec import hookimpl
from mam.registry import text as registry_text
from mam.servers.app import App

LIVE: dict[str, tuple[Agent, ...]] = {}
FORMS = ("hand-written YAML", "as mam writes it")
STEPS = ("load + validate", "reconcile (report)", "reconcile --apply (every tenth row changed)")


class FastBackend:
    name = "fast"

    def list_agents(self, server: str, ctx: CallContext) -> tuple[Agent, ...] | Failure:
        return LIVE.get(server, ())

    def classify(self, failure: Failure) -> ServerError | None:
        return None

    def bootstrap(self, server: str, ctx: Any) -> BootstrapResult:
        return BootstrapResult(False, True, "up")

    def version(self, ctx: CallContext) -> str | None:
        return "fast 1"


class FastPlugin:
    @hookimpl
    def mam_backends(self) -> list[BackendSpec]:
        return [BackendSpec("fast", "in-memory benchmark backend", None, FastBackend)]


def rows_of(count: int, servers: int) -> list[dict[str, Any]]:
    return [{"name": f"agent-{i:05d}", "backend": "fast", "server": f"srv-{i % servers:03d}", "status": "running",
             "agent": "claude", "pane": {"cwd": f"/repo/{i}", "id": f"w1:p{i}"}, "team": "blue"}
            for i in range(count)]


def write_registry(path: Path, count: int, servers: int, form: str) -> None:
    if form == FORMS[1]:
        path.write_text(registry_text.dump({"version": 1, "sessions": rows_of(count, servers)}))
        return
    lines = ["version: 1", "sessions:"]
    for i in range(count):
        lines.append(f"  - {{name: agent-{i:05d}, backend: fast, server: srv-{i % servers:03d}, status: running, "
                     f"agent: claude, pane: {{cwd: /repo/{i}, id: 'w1:p{i}'}}, team: blue}}")
    path.write_text("\n".join(lines) + "\n")


def setup(rows: int, servers: int) -> tuple[Path, Callable[[], App]]:
    """A workspace, and every server listing its rows except every tenth one: 1,000 drift A rows at 10,000."""
    root = Path(tempfile.mkdtemp(prefix="mam-bench-reg-"))
    (root / ".mam").mkdir()
    env = {**os.environ, "MAM_LOAD_PLUGINS": ""}
    for s in range(servers):
        LIVE[f"srv-{s:03d}"] = tuple(Agent(f"agent-{i:05d}", "claude") for i in range(s, rows, servers) if i % 10)

    def app() -> App:
        a = App.open(str(root), "fast", env)
        a.plugins._register(FastPlugin(), "bench-fast", "bench")  # an in-memory backend
        return a

    return root / ".mam" / "agent-sessions.yaml", app


def step_function(step: str, path: Path, app: Callable[[], App], rows: int) -> Callable[[], None]:
    if step == STEPS[0]:
        return lambda: None if registry.load(path, "herdr") else None
    if step == STEPS[1]:
        return lambda: None if reconcile_document(app()) else None

    def apply() -> None:
        doc = reconcile_document(app(), apply=True)
        assert sum(d["class"] == "A" for d in doc["drifts"]) == rows // 10 and doc["applied"]
    return apply


def time_step(step: str, form: str, rows: int, servers: int, runs: int) -> dict[str, float]:
    """Median wall time of `runs` calls (the file rewritten before each, untimed), then the Python heap's peak
    during one more call under tracemalloc (which slows allocation several times, so it is never timed)."""
    path, app = setup(rows, servers)
    fn = step_function(step, path, app, rows)
    times = []
    for _ in range(runs):
        write_registry(path, rows, servers, form)
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    write_registry(path, rows, servers, form)
    tracemalloc.start()
    fn()
    heap = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return {"ms": median(times), "heap_mib": heap, "rss_mib": peak_rss(step, form, rows, servers)}


def peak_rss(step: str, form: str, rows: int, servers: int) -> float:
    """The peak RSS of a fresh process that sets up and runs the step once (interpreter and imports included)."""
    out = subprocess.run([sys.executable, __file__, "--child", str(STEPS.index(step)), str(FORMS.index(form)),
                          "--rows", str(rows), "--servers", str(servers)], capture_output=True, text=True,
                         check=True, timeout=600)
    return float(json.loads(out.stdout)["rss_mib"])


def child(step: str, form: str, rows: int, servers: int) -> None:
    path, app = setup(rows, servers)
    write_registry(path, rows, servers, form)
    step_function(step, path, app, rows)()
    # VmHWM, not getrusage: ru_maxrss survives exec, so it would report the parent benchmark's size
    status = Path("/proc/self/status").read_text()
    kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    print(json.dumps({"rss_mib": kib / 1024}))


def write_cost(rows: int, servers: int, runs: int) -> float:
    """Median time of one registry write that adds one row, on a file of `rows` rows as mam writes it."""
    path, _ = setup(0, servers)
    write_registry(path, rows, servers, FORMS[1])
    count = [0]

    def change(doc: dict[str, Any], found: tuple[registry.Row, ...]) -> bool:
        count[0] += 1
        doc["sessions"].append({"name": f"new-{count[0]}", "backend": "fast", "server": "srv-000"})
        return True

    times = []
    for _ in range(runs):
        started = time.perf_counter()
        registry.update(path, "herdr", change)
        times.append((time.perf_counter() - started) * 1000)
    return median(times)


def measure(rows: int = 10000, servers: int = 100, runs: int = 5) -> dict[str, Any]:
    path, _ = setup(0, servers)
    sizes = {}
    for form in FORMS:
        write_registry(path, rows, servers, form)
        sizes[form] = path.stat().st_size
    steps = {form: {step: time_step(step, form, rows, servers, runs) for step in STEPS} for form in FORMS}
    writes = {n: write_cost(n, servers, runs) for n in sorted({10, 100, 1000, rows})}
    return {"rows": rows, "servers": servers, "runs": runs, "bytes": sizes, "steps": steps, "writes": writes}


def table(result: dict[str, Any]) -> str:
    lines = [f"Registry of {result['rows']} rows over {result['servers']} servers "
             f"({', '.join(f'{f}: {b / 2**20:.1f} MiB' for f, b in result['bytes'].items())}):", "",
             f"| step | file | median of {result['runs']} | Python heap peak | process peak RSS |",
             "|---|---|---|---|---|"]
    for form, steps in result["steps"].items():
        for step, m in steps.items():
            lines.append(f"| {step} | {form} | {m['ms']:.0f} ms | {m['heap_mib']:.0f} MiB | {m['rss_mib']:.0f} MiB |")
    lines += ["", "One registry write (add one row) as the file grows (as mam writes it):", "",
              "| rows | median write |", "|---|---|"]
    lines += [f"| {n} | {ms:.1f} ms |" for n, ms in result["writes"].items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--servers", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--child", type=int, nargs=2, metavar=("STEP", "FORM"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(STEPS[args.child[0]], FORMS[args.child[1]], args.rows, args.servers)
        return
    print(table(measure(args.rows, args.servers, args.runs)))


if __name__ == "__main__":
    main()
