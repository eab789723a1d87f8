"""What 49 more tmux servers cost `mam status`, beside what they cost a raw parallel fan-out of the same tmux calls.

Like with like: the marginal cost, `status` over 50 servers minus `status` over 1 (the same first server), so
the fixed costs (the interpreter, mam's imports, the plugin manager, the registry) cancel; and the raw side is a
Python process that runs, in one thread per server, the exact argv mam runs for each server (built here by the
tmux backend's own functions), in the environment mam gives its backend calls, reading both pipes to the end
(Popen.communicate, which selects on both pipes as mam's runner does). Two comparisons:

- listing: `mam status --no-state --json` against the raw `list-panes -a` per server;
- states: `mam status --json` against the raw `list-panes -a` then the capture call per server (the panes' ids
  are read once, here, from the listing; the raw side captures those panes).

Every case is a fresh process, all eight timed in turns (shuffled within each round, so that no case always
follows another); mam's bytecode is compiled first. The ratio is of the medians of the marginals; its spread is
the same ratio in each block of `--block` rounds.

Run: python3 bench/fanout_marginal.py [--servers 50] [--agents 4] [--rounds 30] [--block 10] [--write]. --write
puts its section into bench/RESULTS.md and its samples into bench/results.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import median, run_ms, write_registry, write_section
from tmux_status import tmux_servers

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
TARGET = 1.30
HEADING = "## Marginal cost of tmux servers"
LISTING, STATES = "listing (--no-state)", "listing and capture (states)"
MAM, RAW = "mam status", "raw fan-out"

# The raw side: one thread per server, each running its argvs one after the other and reading all output.
RAW_CHILD = r"""
import json, subprocess, sys, threading
with open(sys.argv[1]) as f:
    plan = json.load(f)
env = plan["env"]
def one(argvs):
    for argv in argvs:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, start_new_session=True)
        out, err = proc.communicate(timeout=plan["timeout"])
        out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        if proc.returncode != 0:
            sys.exit(f"{argv} exited {proc.returncode}: {err[-500:]!r}")
jobs = plan["jobs"]
if len(jobs) == 1:  # as mam: one server is asked in the main thread
    one(jobs[0])
else:
    threads = [threading.Thread(target=one, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
"""


def _mam_env(env: dict[str, str]) -> dict[str, str]:
    """mam from this checkout (not whatever `mam` is installed), its backends too."""
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "backends")])
    return out


def _plans(env: dict[str, str], workspace: str, servers: list[str], tmp: str) -> dict[tuple[str, int], str]:
    """The raw side's plan files: (comparison, server count) -> path. Each server's argvs as mam builds them."""
    sys.path[:0] = [str(ROOT), str(ROOT / "backends")]
    from mam.servers.app import App
    from mam_tmux import backend as tmux

    app = App.open(workspace, "tmux", env)
    app.plugins.backend("tmux")
    call_env = tmux.client_env(app.backend_env)
    nonce = "mam-" + "0" * 32
    jobs: dict[str, dict[str, list[list[str]]]] = {LISTING: {}, STATES: {}}
    for server in servers:
        listing = tmux.base_argv(server, query=True, env=app.backend_env) + ["list-panes", "-a", "-F",
                                                                           tmux.LIST_FORMAT]
        out = subprocess.run(listing, env=call_env, capture_output=True, text=True, check=True, timeout=30).stdout
        panes = [a.pane_id for a in tmux.parse_panes(out) if a.pane_id]
        capture = tmux.capture_args(panes, nonce)  # as TmuxBackend._capture builds it (fewer than CAPTURE_BATCH)
        jobs[LISTING][server] = [listing]
        jobs[STATES][server] = [listing, tmux.base_argv(server, query=True, env=app.backend_env) + capture]
    plans = {}
    for comparison, per_server in jobs.items():
        for count in (1, len(servers)):
            path = os.path.join(tmp, f"plan-{len(plans)}.json")
            Path(path).write_text(json.dumps({"env": call_env, "timeout": app.timeout,
                                              "jobs": [per_server[s] for s in servers[:count]]}))
            plans[(comparison, count)] = path
    return plans


def _timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """Wall time of one process and the CPU time (user + system) it and the children it waited for used, in
    ms: a blocking wait4, as common.run_ms waits. CPU time is what load barely changes."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = (time.perf_counter() - started) * 1000
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        run_ms(argv, env, cwd)  # raises, with the reason
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def measure(servers: int = 50, agents: int = 4, rounds: int = 30, seed: int = 1) -> dict[str, Any]:
    load_before = os.getloadavg()
    with tmux_servers(servers, agents, prefix="fan") as (env, workspace):
        names = [f"fan-{i:03d}" for i in range(servers)]
        one_server = tempfile.mkdtemp(prefix="mam-fan-ws1-")
        rows = [{"name": f"agent-{a}", "backend": "tmux", "server": names[0], "status": "running"}
                for a in range(agents)]
        write_registry(one_server, rows)
        tmp = tempfile.mkdtemp(prefix="mam-fan-plans-")
        try:
            plans = _plans(env, workspace, names, tmp)
            menv = _mam_env(env)
            cases: list[tuple[str, str, int, list[str], str]] = []  # (comparison, side, count, argv, cwd)
            for comparison, flags in ((LISTING, ["--no-state"]), (STATES, [])):
                for count, cwd in ((1, one_server), (servers, workspace)):
                    cases.append((comparison, MAM, count,
                                  [sys.executable, "-m", "mam", "--backend", "tmux", "status", *flags, "--json"], cwd))
                    cases.append((comparison, RAW, count,
                                  [sys.executable, "-c", RAW_CHILD, plans[(comparison, count)]], cwd))
            for _, side, count, argv, cwd in cases:  # warm-up, untimed; mam must have asked `count` servers
                run_ms(argv, {**menv, "MAM_WORKSPACE": cwd}, cwd)
                if side == MAM:
                    doc = json.loads(subprocess.run(argv, env={**menv, "MAM_WORKSPACE": cwd}, cwd=cwd, check=True,
                                                    capture_output=True, text=True, timeout=120).stdout)
                    assert [s["state"] for s in doc["servers"]] == ["up"] * count, doc["servers"]
            samples: dict[str, list[float]] = {f"{c}|{s}|{n}": [] for c, s, n, _, _ in cases}
            cpu: dict[str, list[float]] = {key: [] for key in samples}
            pairs = [[case for case in cases if case[:2] == pair] for pair in {case[:2]: None for case in cases}]
            rng = random.Random(seed)
            for _ in range(rounds):
                # The two counts of one side run back to back (in either order), so that their difference sees
                # one moment's load; the four sides in a fresh order each round.
                rng.shuffle(pairs)
                for pair in pairs:
                    for comparison, side, count, argv, cwd in rng.sample(pair, 2):
                        wall, used = _timed(argv, {**menv, "MAM_WORKSPACE": cwd}, cwd)
                        samples[f"{comparison}|{side}|{count}"].append(wall)
                        cpu[f"{comparison}|{side}|{count}"].append(used)
        finally:
            shutil.rmtree(one_server, ignore_errors=True)
            shutil.rmtree(tmp, ignore_errors=True)
    return {"servers": servers, "agents": agents, "rounds": rounds, "samples": samples, "cpu": cpu,
            "load": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
            "date": datetime.date.today().isoformat()}


def marginals(result: dict[str, Any], comparison: str, side: str, start: int = 0,
              stop: int | None = None, measure: str = "samples") -> list[float]:
    """Per round: the side's time over all servers minus its time over one, in ms (`measure` "cpu": CPU time)."""
    s = result[measure]
    many, one = s[f"{comparison}|{side}|{result['servers']}"], s[f"{comparison}|{side}|1"]
    return [a - b for a, b in zip(many[start:stop], one[start:stop], strict=True)]


def ratio(result: dict[str, Any], comparison: str, start: int = 0, stop: int | None = None,
          measure: str = "samples") -> float:
    return median(marginals(result, comparison, MAM, start, stop, measure)) / median(
        marginals(result, comparison, RAW, start, stop, measure))


def block_ratios(result: dict[str, Any], comparison: str, block: int) -> list[float]:
    rounds = result["rounds"]
    return [ratio(result, comparison, i, i + block) for i in range(0, rounds - block + 1, block)]


def section(result: dict[str, Any], block: int = 10) -> str:
    n, s = result["servers"], result["samples"]
    lines = [f"{HEADING} (`bench/fanout_marginal.py`, {result['rounds']} rounds)", "",
             f"Target: what {n - 1} more tmux servers cost `mam status` at most {TARGET}x what they cost a raw "
             "parallel fan-out of the same tmux calls (same argv, same environment, both pipes read to the end, one "
             "thread per server). Marginal = the median over rounds of (time over "
             f"{n} servers - time over 1), {result['agents']} agents a server; bytecode compiled; the eight "
             f"commands timed in shuffled turns. Measured {result['date']}, load average "
             f"{' '.join(map(str, result['load']))} before and {' '.join(map(str, result['load_after']))} after "
             "(2 cores, other jobs running).", "",
             f"| comparison | mam, 1 server | mam, {n} | raw, 1 | raw, {n} | mam marginal | raw marginal | ratio | "
             f"ratio per {block} rounds | CPU time: mam marginal, raw marginal, ratio | |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for comparison in (LISTING, STATES):
        m = {k: median(v) for k, v in s.items() if k.startswith(comparison + "|")}
        r = ratio(result, comparison)
        blocks = block_ratios(result, comparison, block)
        lines.append(
            f"| {comparison} | {m[f'{comparison}|{MAM}|1']:.0f} ms | {m[f'{comparison}|{MAM}|{n}']:.0f} ms | "
            f"{m[f'{comparison}|{RAW}|1']:.0f} ms | {m[f'{comparison}|{RAW}|{n}']:.0f} ms | "
            f"{median(marginals(result, comparison, MAM)):.1f} ms | {median(marginals(result, comparison, RAW)):.1f} ms"
            f" | {r:.2f}x | {', '.join(f'{b:.2f}' for b in blocks)} | "
            f"{median(marginals(result, comparison, MAM, measure='cpu')):.1f} ms, "
            f"{median(marginals(result, comparison, RAW, measure='cpu')):.1f} ms, "
            f"{ratio(result, comparison, measure='cpu'):.2f}x | {'met' if r <= TARGET else '**missed**'} |")
    return "\n".join(lines) + "\n"


def write(result: dict[str, Any], block: int) -> None:
    write_section(HEADING, section(result, block), "fanout_marginal", result)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", type=int, default=50)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--write", action="store_true", help="update bench/RESULTS.md and bench/results.json")
    args = parser.parse_args()
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still kills its tmux servers
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "mam"), str(ROOT / "backends")],
                   check=True, timeout=120)
    result = measure(args.servers, args.agents, args.rounds)
    print(section(result, args.block))
    if args.write:
        write(result, args.block)


if __name__ == "__main__":
    main()
