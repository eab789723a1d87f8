"""`mam top` at scale: 1,000 agents on 100 real tmux servers (10 idle stand-ins each), the view running in a real
terminal (a pane of a private tmux server, 160x48) for `--minutes`, sampled every few seconds: its CPU (utime +
stime of the process, every thread, from /proc/PID/stat), the CPU of the tmux clients it ran (its reaped
children), its RSS; what the fleet's own tmux servers cost meanwhile. Then, over the same fleet: one refresh of
the view's poller, timed inside this process (as `bench/top_refresh.py` times it), and whole `mam status --json`
processes.

A stand-in agent is `sh -c 'cat SCREEN; exec sleep ...'`: it prints the idle screen of its kind (the stand-in
agents' own drawing, tests/agents/standin.py) and then is one sleeping process, so 1,000 of them cost the
machine little and every screen stays unchanged: what the view pays at idle is its own doing.

Run: python3 bench/top_idle.py [--servers 100] [--agents 10] [--minutes 10] [--runs 5] [--write]. Alone only
(not in run.py): ten minutes. Every process it starts (the tmux servers, the view) is killed by pid at the end.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import clean_env, interleaved, median, write_registry, write_section

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(ROOT / "backends")]  # this checkout's mam, before anything imports one
KINDS = ("claude", "codex", "gemini", "opencode", "aider")
VIEW = (160, 48)
TICKS = os.sysconf("SC_CLK_TCK")
HEADING = "## mam top at scale"
TARGET_CPU = 5.0  # % of one core, at idle
FOREVER = "2147483647"


def _screens(folder: Path) -> dict[str, Path]:
    """Each kind's idle screen, as the stand-in agent draws it, in a file a pane can `cat`."""
    spec = importlib.util.spec_from_file_location("standin", ROOT / "tests" / "agents" / "standin.py")
    assert spec is not None and spec.loader is not None
    standin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(standin)
    out = {}
    for kind in KINDS:
        path = folder / f"{kind}.txt"
        path.write_text(standin.screen(kind, "idle"))
        out[kind] = path
    return out


def _tmux(env: dict[str, str], *argv: str, timeout: float = 60) -> str:
    return subprocess.run(["tmux", *argv], env=env, check=True, capture_output=True, text=True,
                          timeout=timeout).stdout


@contextmanager
def fleet(servers: int, agents: int) -> Iterator[tuple[dict[str, str], str, list[int]]]:
    """`servers` real tmux servers on private sockets, `agents` idle stand-ins each, and a workspace whose registry
    (as mam writes it) lists them all: the environment to run mam in, the workspace, the servers' pids. Each
    server is made by one tmux call (its sessions chained with `;`). Killed by pid on exit."""
    tmpdir = tempfile.mkdtemp(prefix="mt", dir="/tmp")  # short: socket paths are limited
    workspace = tempfile.mkdtemp(prefix="mam-topidle-ws-")
    env = clean_env(TMUX_TMPDIR=tmpdir, MAM_WORKSPACE=workspace, MAM_TMUX_CONFIG="/dev/null")
    pids: list[int] = []
    try:
        screens = _screens(Path(tmpdir))
        rows = []
        for number in range(servers):
            server = f"top-{number:03d}"
            chain: list[str] = ["-L", server, "-f", "/dev/null"]
            for a in range(agents):
                kind = KINDS[(number + a) % len(KINDS)]
                session = f"s{number:03d}-agent-{a}"
                chain += [*([";"] if a else []), "new-session", "-d", "-s", session, "-x", "120", "-y", "40",
                          f"cat {screens[kind]}; exec sleep {FOREVER}", ";", "set-option", "-t", session,
                          "@mam_agent", kind]
                rows.append({"name": session, "backend": "tmux", "server": server, "status": "running",
                             "agent": kind})
            _tmux(env, *chain)
            pids.append(int(_tmux(env, "-L", server, "display-message", "-p", "#{pid}").strip()))
        write_registry(workspace, rows)
        time.sleep(1.0)  # every pane has printed its screen
        yield env, workspace, pids
    finally:
        _kill(pids)
        shutil.rmtree(tmpdir, ignore_errors=True)
        shutil.rmtree(workspace, ignore_errors=True)


def _kill(pids: list[int]) -> None:
    """SIGTERM each pid (a tmux server ends its panes' processes as it goes), then SIGKILL what is left."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    for pid in pids:
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.05)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the process's own CPU, every thread; its reaped children's), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / TICKS, (cutime + cstime) / TICKS


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pss_mib(pids: list[int]) -> float:
    """Proportional set size of the pids and their children (a server's panes), shared pages split fairly."""
    total = 0
    for pid in pids + [c for p in pids for c in _children(p)]:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


@contextmanager
def view(env: dict[str, str], workspace: str, args: list[str]) -> Iterator[tuple[dict[str, str], int]]:
    """`mam --backend tmux top` of this checkout in a pane of its own private tmux server (its own TMUX_TMPDIR,
    160x48): the host's environment and the view's pid. The host server and the view are killed by pid."""
    hostdir = tempfile.mkdtemp(prefix="mh", dir="/tmp")
    host = clean_env(TMUX_TMPDIR=hostdir, TERM="xterm-256color")
    here = os.pathsep.join([str(ROOT), str(ROOT / "backends")])
    # `env` execs: the pane's pid is the view's. TMUX unset: the view is not told it runs inside a tmux.
    command = ["env", "-u", "TMUX", "-u", "TMUX_PANE", f"TMUX_TMPDIR={env['TMUX_TMPDIR']}",
               f"MAM_WORKSPACE={workspace}", "MAM_TMUX_CONFIG=/dev/null", f"PYTHONPATH={here}",
               sys.executable, "-m", "mam", "--backend", "tmux", "top", *args]
    pids: list[int] = []
    try:
        _tmux(host, "-L", "view", "-f", "/dev/null", "new-session", "-d", "-s", "view", "-x", str(VIEW[0]),
              "-y", str(VIEW[1]), "-c", workspace, "--", *command)
        pids.append(int(_tmux(host, "-L", "view", "display-message", "-p", "#{pid}").strip()))
        pane = int(_tmux(host, "-L", "view", "display-message", "-p", "-t", "view", "#{pane_pid}").strip())
        pids.insert(0, pane)
        yield host, pane
    finally:
        _kill(pids)
        shutil.rmtree(hostdir, ignore_errors=True)


def screen(host: dict[str, str]) -> str:
    return _tmux(host, "-L", "view", "capture-pane", "-p", "-t", "view")


def wait_for_rows(host: dict[str, str], agents: int, limit: float = 120) -> float:
    """Seconds until the view's title counts every agent and no row still waits for its first reading."""
    started = time.monotonic()
    want = f"{agents}/{agents} agents"
    while time.monotonic() - started < limit:
        text = screen(host)
        if want in text and "not read yet" not in text and "asking the servers" not in text:
            return time.monotonic() - started
        time.sleep(0.2)
    raise RuntimeError(f"the view never showed {want} within {limit:g} s:\n{screen(host)}")


def watch(pid: int, servers: list[int], minutes: float, every: float) -> dict[str, Any]:
    """Samples of the view's CPU, its children's CPU and its RSS, and the fleet's servers' CPU, over `minutes`."""
    samples: list[dict[str, float]] = []
    started = time.monotonic()
    fleet_cpu = sum(cpu_seconds(p)[0] for p in servers)
    while True:
        own, children = cpu_seconds(pid)
        samples.append({"t": time.monotonic() - started, "cpu": own, "children": children, "rss": rss_mib(pid),
                        "load": os.getloadavg()[0]})
        if samples[-1]["t"] >= minutes * 60:
            break
        time.sleep(max(0.0, min(every, minutes * 60 - samples[-1]["t"])))
    return {"samples": samples, "fleet_cpu_s": sum(cpu_seconds(p)[0] for p in servers) - fleet_cpu}


def percent(samples: list[dict[str, float]], key: str, start: float, end: float) -> float:
    """CPU as % of one core between the samples nearest `start` and `end` seconds."""
    a = min(samples, key=lambda s: abs(s["t"] - start))
    b = min(samples, key=lambda s: abs(s["t"] - end))
    return 100 * (b[key] - a[key]) / (b["t"] - a["t"]) if b["t"] > a["t"] else 0.0


def refresh_and_status(env: dict[str, str], workspace: str, runs: int) -> dict[str, Any]:
    """One refresh of the view's poller in this process; whole `mam status --json` processes."""
    from top_refresh import refresh_costs

    top = refresh_costs(env, workspace, runs)
    here = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "backends")])}
    status = interleaved([("mam status", [sys.executable, "-m", "mam", "--backend", "tmux", "status", "--json"])],
                         runs, here, workspace)
    return {"top": top, "status_ms": status["mam status"], "load": _load()}


def measure(servers: int, agents: int, minutes: float, runs: int, every: float, skip_status: bool,
            view_args: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = {"servers": servers, "agents": servers * agents, "minutes": minutes,
                              "load_before": _load()}
    made = time.monotonic()
    with fleet(servers, agents) as (env, workspace, pids):
        result["fleet_s"] = time.monotonic() - made
        result["fleet_pss_mib"] = pss_mib(pids)
        result["fleet_processes"] = len(pids) + sum(len(_children(p)) for p in pids)
        if not skip_status:
            print(f"one refresh and mam status, {runs} runs ...", file=sys.stderr)
            result.update(refresh_and_status(env, workspace, runs))
        print(f"mam top for {minutes:g} min ...", file=sys.stderr)
        with view(env, workspace, view_args) as (host, pid):
            result["first_screen_s"] = wait_for_rows(host, servers * agents)
            result["watch"] = watch(pid, pids, minutes, every)
            result["screen"] = screen(host)
            if not Path(f"/proc/{pid}").exists():
                raise RuntimeError("the view ended before the measurement did")
    result["load_after"] = _load()
    return result


def summary(result: dict[str, Any]) -> dict[str, float]:
    s = result["watch"]["samples"]
    end = s[-1]["t"]
    first = min(60.0, end)
    rss = [x["rss"] for x in s]
    after = [x["rss"] for x in s if x["t"] >= first]
    return {
        "cpu_first": percent(s, "cpu", 0, first), "cpu_after": percent(s, "cpu", first, end),
        "cpu_all": percent(s, "cpu", 0, end),
        "children_first": percent(s, "children", 0, first), "children_after": percent(s, "children", first, end),
        "rss_start": rss[0], "rss_first": after[0] if after else rss[-1], "rss_end": rss[-1], "rss_max": max(rss),
        "fleet_cpu": 100 * result["watch"]["fleet_cpu_s"] / end if end else 0.0,
        "load_max": max(x["load"] for x in s),
    }


def section(result: dict[str, Any], note: str = "") -> str:
    import datetime

    m = summary(result)
    n, k = result["agents"], result["servers"]
    minutes = result["minutes"]
    met = m["cpu_after"] < TARGET_CPU and m["rss_end"] - m["rss_first"] < 5
    out = [
        f"{HEADING}: {n} agents on {k} tmux servers (`bench/top_idle.py`)",
        "",
        f"Measured by `python3 bench/top_idle.py --write` on {datetime.date.today().isoformat()}; load average "
        f"{result['load_before']} before, {result['load_after']} after (2 cores; highest 1-minute load while the "
        f"view ran: {m['load_max']:.2f}).{(' ' + note) if note else ''}",
        "",
        f"The fleet: {k} real tmux servers on private sockets, {n // k} idle stand-in agents each (their kind's "
        f"idle screen printed, then one `sleep`): {result['fleet_processes']} processes, "
        f"{result['fleet_pss_mib']:.0f} MiB (proportional set size), made in {result['fleet_s']:.0f} s; its "
        f"servers used {m['fleet_cpu']:.1f}% of a core while the view ran (answering the view's calls).",
        "",
        f"Target: at idle, `mam top` under {TARGET_CPU:g}% of one core and flat memory over {minutes:g} minutes: "
        f"{m['cpu_after']:.1f}% and {m['rss_first']:.0f} -> {m['rss_end']:.0f} MiB, {'met' if met else '**missed**'}.",
        "",
        "| `mam top` in a 160x48 pane, nothing changing | first minute | after | whole run |",
        "|---|---:|---:|---:|",
        f"| CPU of the view (% of one core, every thread) | {m['cpu_first']:.1f}% | {m['cpu_after']:.1f}% | "
        f"{m['cpu_all']:.1f}% |",
        f"| CPU of the tmux clients it ran | {m['children_first']:.1f}% | {m['children_after']:.1f}% | |",
        f"| RSS | {m['rss_start']:.0f} -> {m['rss_first']:.0f} MiB | {m['rss_first']:.0f} -> {m['rss_end']:.0f} MiB "
        f"| max {m['rss_max']:.0f} MiB |",
        "",
        f"First full screen (every row read) {result['first_screen_s']:.1f} s after the view started.",
        "",
    ]
    if "top" in result:
        top = result["top"]
        status = result["status_ms"]
        out += [
            f"Over the same fleet (load average {result['load']} as it ended), {len(status)} runs each:",
            "",
            "| | median | min | max |",
            "|---|---:|---:|---:|",
            *(f"| one refresh of the view: {label} | {median(top[key]):.0f} ms | {min(top[key]):.0f} ms | "
              f"{max(top[key]):.0f} ms |"
              for label, key in (("wall", "wall_ms"), ("CPU of mam (every thread)", "cpu_ms"),
                                 ("CPU of the tmux calls", "children_cpu_ms"))),
            f"| `mam --backend tmux status --json`, a whole process | {median(status):.0f} ms | {min(status):.0f} ms "
            f"| {max(status):.0f} ms |",
            "",
        ]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=100)
    parser.add_argument("--agents", type=int, default=10, help="per server")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=5, help="of one refresh and of mam status")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between two samples")
    parser.add_argument("--skip-status", action="store_true", help="the view alone")
    parser.add_argument("--note", default="", help="a sentence added to the section (what else ran)")
    parser.add_argument("--write", action="store_true", help="update bench/RESULTS.md and bench/results.json")
    args, view_args = parser.parse_known_args()
    if shutil.which("tmux") is None:
        raise SystemExit("needs tmux")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still kills what it started
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "mam"), str(ROOT / "backends")],
                   check=True, timeout=120)
    result = measure(args.servers, args.agents, args.minutes, args.runs, args.every, args.skip_status, view_args)
    print(section(result, args.note))
    if args.write:
        kept = {key: value for key, value in result.items() if key != "screen"}  # the samples, not the view's text
        write_section(HEADING, section(result, args.note), "top_idle", kept)


if __name__ == "__main__":
    main()
