"""`mam --backend tmux status --json` over N real tmux servers, beside shell loops over the same servers.

Run: python3 bench/tmux_status.py [--servers 20] [--agents 4] [--runs 10]. Servers live on private sockets
under a temporary TMUX_TMPDIR and are killed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile

from startup import median_ms  # bench/ is on sys.path when run as python3 bench/tmux_status.py

FORMAT = "#{session_id}\x1f#{session_name}\x1f#{pane_current_path}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", type=int, default=20)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    mam = shutil.which("mam")
    if mam is None or shutil.which("tmux") is None:
        raise SystemExit("needs mam (pip install -e .) and tmux")
    tmpdir = tempfile.mkdtemp(prefix="mb", dir="/tmp")
    workspace = tempfile.mkdtemp(prefix="mam-bench-ws-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAM_", "TMUX", "CLAUDE", "WORKSPACE_ROOT"))}
    env.update({"TMUX_TMPDIR": tmpdir, "MAM_WORKSPACE": workspace, "MAM_TMUX_CONFIG": "/dev/null"})
    servers = [f"bench-{i:03d}" for i in range(args.servers)]
    try:
        rows = []
        for server in servers:
            for a in range(args.agents):
                name = f"agent-{a}"
                subprocess.run(["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-s", name,
                                "sleep 3600"], env=env, check=True, timeout=30)
                rows.append(f"  - {{name: {name}, backend: tmux, server: {server}, status: running}}\n")
        os.makedirs(os.path.join(workspace, ".mam"), exist_ok=True)
        with open(os.path.join(workspace, ".mam", "agent-sessions.yaml"), "w") as handle:
            handle.write("version: 1\nsessions:\n" + "".join(rows))
        words = " ".join(servers)
        sequential = ["bash", "-c", f'for s in {words}; do tmux -N -L "$s" list-sessions -F "{FORMAT}"; done']
        parallel = ["bash", "-c", f'for s in {words}; do tmux -N -L "$s" list-sessions -F "{FORMAT}" & done; wait']
        cases = [
            (f"mam --backend tmux status --json ({args.servers} servers)", [mam, "--backend", "tmux", "status",
                                                                            "--json"]),
            (f"mam --backend tmux reconcile --json ({args.servers} servers)", [mam, "--backend", "tmux",
                                                                               "reconcile", "--json"]),
            ("shell loop: tmux list-sessions per server, sequential", sequential),
            ("shell loop: the same, all in parallel", parallel),
        ]
        results = {label: median_ms(argv, args.runs, env, workspace) for label, argv in cases}
        base = results[cases[2][0]]
        print(f"| command | median of {args.runs} | vs sequential loop |")
        print("|---|---|---|")
        for label, ms in results.items():
            print(f"| {label} | {ms:.0f} ms | {ms / base:.2f}x |")
    finally:
        for server in servers:
            subprocess.run(["tmux", "-L", server, "kill-server"], env=env, capture_output=True, timeout=30)
        shutil.rmtree(tmpdir, ignore_errors=True)
        shutil.rmtree(workspace, ignore_errors=True)


if __name__ == "__main__":
    main()
