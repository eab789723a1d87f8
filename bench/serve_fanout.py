"""What `mam serve` costs the servers: one poller however many browsers. A real `mam serve` app on uvicorn (in this
process, on a free 127.0.0.1 port) over real tmux servers of stand-in agents (one working, redrawing, per
server), with 1 then 10 event-stream clients for the same time: the listing calls the poller made (each one
`mam status --server S` call) must not grow with the clients. Then `GET /api/status` over 1,000 agents (100 tmux
servers of 10 sleeping panes), beside one whole `mam status --json` process over the same fleet.

With --memory-minutes M: the resident memory of the process serving 10 event streams, once a minute for M minutes.

Run: python3 bench/serve_fanout.py [--seconds 20] [--status-runs 5] [--memory-minutes 10].
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from common import interleaved, median
from state_status import servers_with_agents
from tmux_status import tmux_servers

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "backends")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """The app of `mam serve` on uvicorn in a thread of this process, so that its poller can be counted."""

    def __init__(self, env: dict[str, str], workspace: str) -> None:
        import uvicorn

        from mam.live.actions import Actions
        from mam.servers.app import App
        from mam.web.guard import Bind, Guard
        from mam.web.routes import make

        self.port = free_port()
        self.app, self.serve = make(Actions(App.open(workspace, "tmux", env)), Guard(Bind("127.0.0.1", self.port)))
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def stream(base: str, seconds: float, counts: list[int], index: int, stop: threading.Event) -> None:
    import httpx

    with httpx.stream("GET", base + "/api/events", timeout=httpx.Timeout(seconds + 30, connect=10)) as response:
        for line in response.iter_lines():
            if line.startswith("event: "):
                counts[index] += 1
            if stop.is_set():
                return


def calls_with(served: Served, clients: int, seconds: float) -> dict[str, Any]:
    counts = [0] * clients
    stop = threading.Event()
    threads = [threading.Thread(target=stream, args=(served.base, seconds, counts, i, stop), daemon=True)
               for i in range(clients)]
    for t in threads:
        t.start()
    time.sleep(1)  # connected; the poller has been running since the app started
    poller = served.serve.hub.poller
    calls, cpu = poller.calls, time.process_time()
    time.sleep(seconds)
    made, spent = poller.calls - calls, time.process_time() - cpu
    stop.set()
    return {"clients": clients, "calls": made, "calls_per_s": made / seconds, "events_min": min(counts),
            "cpu_s": spent}


def fanout(seconds: float, servers: int = 5, agents: int = 4) -> list[dict[str, Any]]:
    with servers_with_agents(servers, agents) as (env, workspace), Served(env, workspace) as served:
        time.sleep(3)  # the first refreshes load the plugins and the rules
        return [calls_with(served, n, seconds) for n in (1, 10)]


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def memory(minutes: float, servers: int = 5, agents: int = 4) -> list[tuple[float, float]]:
    """This process's resident memory (the app, its poller and 10 event streams' server side) once a minute."""
    with servers_with_agents(servers, agents) as (env, workspace), Served(env, workspace) as served:
        counts = [0] * 10
        stop = threading.Event()
        for i in range(10):
            threading.Thread(target=stream, args=(served.base, minutes * 60, counts, i, stop), daemon=True).start()
        begun, samples = time.monotonic(), []
        while (elapsed := time.monotonic() - begun) < minutes * 60:
            samples.append((elapsed / 60, rss_mib()))
            time.sleep(min(60.0, max(1.0, minutes * 60 - elapsed)))
        samples.append(((time.monotonic() - begun) / 60, rss_mib()))
        stop.set()
        return samples


def status_over(runs: int, servers: int = 100, agents: int = 10) -> dict[str, Any]:
    import httpx

    with tmux_servers(servers, agents) as (env, workspace), Served(env, workspace) as served:
        samples = []
        for run in range(runs + 1):
            begun = time.perf_counter()
            response = httpx.get(served.base + "/api/status", timeout=120)
            took = (time.perf_counter() - begun) * 1000
            assert response.status_code == 200 and len(response.json()["sessions"]) == servers * agents
            if run:
                samples.append(took)
        here = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "backends")])}
        process = interleaved([("mam status", [sys.executable, "-m", "mam", "--backend", "tmux", "status", "--json"])],
                              runs, here, workspace)["mam status"]
    return {"agents": servers * agents, "servers": servers, "api_ms": samples, "process_ms": process}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--status-runs", type=int, default=5)
    parser.add_argument("--memory-minutes", type=float, default=0,
                        help="instead: resident memory with 10 event streams over this many minutes")
    args = parser.parse_args()
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still kills its tmux servers
    if args.memory_minutes:
        print("| minute | RSS (MiB) |\n|---:|---:|")
        for minute, mib in memory(args.memory_minutes):
            print(f"| {minute:.1f} | {mib:.1f} |")
        return
    print(f"## mam serve: one poller however many clients ({args.seconds:g} s each)\n")
    print("| event-stream clients | listing calls | calls/s | events per client (least) | CPU of mam |")
    print("|---:|---:|---:|---:|---:|")
    for r in fanout(args.seconds):
        print(f"| {r['clients']} | {r['calls']} | {r['calls_per_s']:.2f} | {r['events_min']} | {r['cpu_s']:.2f} s |")
    s = status_over(args.status_runs)
    print(f"\n## GET /api/status over {s['agents']} agents on {s['servers']} tmux servers ({args.status_runs} runs)\n")
    print(f"- /api/status: median {median(s['api_ms']):.0f} ms (min {min(s['api_ms']):.0f}, max "
          f"{max(s['api_ms']):.0f})")
    print(f"- one `mam status --json` process: median {median(s['process_ms']):.0f} ms (start-up included)")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
