"""Status over N tmux servers on a remote host (a real sshd on 127.0.0.1) against the same N servers here: the
first call (no shared connection yet) and warm (ssh's ControlMaster up), timed in turns, in one run.

Run: python3 bench/remote_status.py [--servers 10] [--agents 4] [--runs 10]. Needs tmux and OpenSSH (sshd is
started on a free loopback port with throwaway keys, as the tests do: tests/sshd.py). The "remote" servers are
this machine's, on private sockets under a temporary TMUX_TMPDIR that the route sets on the remote side.

What is timed: `mam status --json` itself (MODE "cli", the default): a fresh process each time, over a registry
whose rows carry `host: mam-test` against the same rows without a host. MODE "api" times one status fan-out
through the backend object inside a route instead (no process start-up), for profiling the transport.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import median
from tmux_status import tmux_servers

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import sshd as loopback

LOCAL, FIRST, WARM = "local", "remote, first call", "remote, warm (shared connection)"
FIRST_BATCHED = "remote, first call, one ssh session per fan-out (Route.batched)"
BATCHED = "remote, warm, one ssh session per fan-out (Route.batched)"
MODE = "cli"  # "api": the fan-out through the backend object, without mam's own start-up
HOST = loopback.ALIAS


@contextmanager
def loopback_sshd(plain_login: bool = True) -> Iterator[loopback.Sshd]:
    """An sshd on 127.0.0.1 only, a free port, throwaway keys; stopped (with its connections) on exit. With
    `plain_login` the login's HOME is an empty folder: sshd runs the user's shell for every call, and a shell rc
    of this machine (bash reads ~/.bashrc under sshd) would be timed as if it were the transport's cost."""
    if not loopback.SSHD.exists() or shutil.which("ssh") is None:
        raise SystemExit(f"needs OpenSSH: {loopback.SSHD} and ssh")
    root = Path(tempfile.mkdtemp(prefix="mam-bench-sshd-"))
    port = loopback._free_port()
    for key in ("host_ed25519", "user_ed25519", "wrong_ed25519"):
        loopback._keygen(root / key)
    (root / "authorized_keys").write_text((root / "user_ed25519.pub").read_text())
    host_key = (root / "host_ed25519.pub").read_text().split()
    (root / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    home = root / "home"  # the login's HOME: an empty one, so no rc file of this machine's user is in the times
    home.mkdir()
    config = loopback._server_config(root, port)
    (root / "sshd_config").write_text(config + (f"SetEnv HOME={home}\n" if plain_login else ""))
    loopback._client_config(root / "ssh_config", root, port, root / "user_ed25519")
    loopback._client_config(root / "wrong_key_config", root, port, root / "wrong_ed25519")
    server = loopback.Sshd(root, port, root / "ssh_config", root / "wrong_key_config", {})
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _route(server: loopback.Sshd, control: Path, tmpdir: str, home: str) -> Any:
    from mam.calls.remote import unset_patterns
    from mam.calls.route import Route
    from mam.calls.transport import SshTransport
    from mam.plugin.envscrub import DEFAULT_RULES, keep_rules

    scrub = [rule.pattern for rule in DEFAULT_RULES] + ["TMUX", "TMUX_PANE", "HERDR_*", "ZELLIJ*"]
    transport = SshTransport(HOST, control, 10, ssh_config=server.config_path)
    return Route(transport, unset_patterns(scrub, keep_rules((), "bench")), {"TMUX_TMPDIR": tmpdir, "HOME": home})


def api_listing(servers: Sequence[str], env: dict[str, str], route: Any, *,
                batched: bool = False) -> Callable[[], None]:
    """One status fan-out through the backend object: each server listed in a worker of its own; `batched`:
    the calls of the fan-out share one ssh session (mam.calls.batch)."""
    from mam.api import CallContext, Failure
    from mam.calls.route import with_route
    from mam_tmux.backend import TmuxBackend

    backend = TmuxBackend()
    ctx = CallContext(timeout=10.0, env=env)

    def listing() -> None:
        this = route.batched(len(servers)) if batched else route
        with ThreadPoolExecutor(min(16, len(servers))) as pool:
            answers = list(pool.map(lambda s: with_route(this, backend.list_agents, s, ctx), servers))
        failed = [a for a in answers if isinstance(a, Failure)]
        if failed:
            raise RuntimeError(f"a listing failed: {failed[0]}")

    return listing


def cli_cases(env: dict[str, str], workspace: str) -> list[tuple[str, list[str]]]:
    """Phase 2: `mam status --json` over a registry whose rows carry `host: mam-test` (remote) or none (local),
    with MAM_SSH_CONFIG and MAM_SSH_ENV in `env`. Time them with common.run_ms (a fresh process each)."""
    mam = shutil.which("mam") or "mam"
    return [(LOCAL, [mam, "--backend", "tmux", "status", "--json"]),
            (WARM, [mam, "--backend", "tmux", "status", "--json", "--host", HOST])]


def _timed(fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def measure(servers: int = 10, agents: int = 4, runs: int = 10, plain_login: bool = True) -> dict[str, Any]:
    return measure_cli(servers, agents, runs, plain_login) if MODE == "cli" else measure_api(servers, agents, runs,
                                                                                            plain_login)


def measure_cli(servers: int, agents: int, runs: int, plain_login: bool) -> dict[str, Any]:
    """`mam status --json` here and on the loopback host, in turns; the first remote call of each turn finds no
    shared connection (the masters closed, untimed), the second finds one."""
    from common import run_ms, write_registry

    mam = shutil.which("mam") or "mam"
    with loopback_sshd(plain_login) as server, tmux_servers(servers, agents) as (env, workspace):
        remote_ws = tempfile.mkdtemp(prefix="mbr", dir="/tmp")
        from mam import registry

        rows = [dict(row.raw) for row in registry.load(Path(workspace, ".mam", "agent-sessions.yaml"), "tmux").rows]
        write_registry(remote_ws, [{**row, "host": HOST} for row in rows])
        remote_env = {**env, "MAM_WORKSPACE": remote_ws, "MAM_SSH_CONFIG": str(server.config_path),
                      "MAM_SSH_ENV": f"TMUX_TMPDIR={env['TMUX_TMPDIR']}"}
        status = [mam, "--backend", "tmux", "status", "--json", "--no-state"]
        control = Path(remote_ws) / ".mam" / "ssh"

        def close() -> None:
            server.close_masters(control)
            for fallback in Path("/tmp").glob("mam-ssh-*"):  # the short folder, when .mam/ssh is too long
                server.close_masters(fallback)

        samples: dict[str, list[float]] = {LOCAL: [], FIRST: [], WARM: []}
        try:
            run_ms(status, env, workspace)
            run_ms(status, remote_env, remote_ws)  # warm-ups, and a check that both answer
            for _ in range(runs):
                samples[LOCAL].append(run_ms(status, env, workspace))
                close()
                samples[FIRST].append(run_ms(status, remote_env, remote_ws))
                samples[WARM].append(run_ms(status, remote_env, remote_ws))
        finally:
            close()
            shutil.rmtree(remote_ws, ignore_errors=True)
    return {"runs": runs, "servers": servers, "agents": agents, "mode": "cli", "plain_login": plain_login,
            "samples": samples}


def measure_api(servers: int, agents: int, runs: int, plain_login: bool) -> dict[str, Any]:
    with loopback_sshd(plain_login) as server, tmux_servers(servers, agents) as (env, _workspace):
        names = [f"bench-{i:03d}" for i in range(servers)]
        control = Path(tempfile.mkdtemp(prefix="mbc", dir="/tmp")) / "ssh"  # short: a socket path
        route = _route(server, control, env["TMUX_TMPDIR"], env.get("HOME", "/tmp"))
        local = api_listing(names, env, None)
        remote = api_listing(names, env, route)
        batched = api_listing(names, env, route, batched=True)

        def close() -> None:
            server.close_masters(control)

        samples: dict[str, list[float]] = {LOCAL: [], FIRST: [], WARM: [], FIRST_BATCHED: [], BATCHED: []}
        try:
            local()
            remote()  # one untimed warm-up each
            for _ in range(runs):
                samples[LOCAL].append(_timed(local))
                close()  # untimed: the next call finds no shared connection
                samples[FIRST].append(_timed(remote))
                samples[WARM].append(_timed(remote))
                close()
                samples[FIRST_BATCHED].append(_timed(batched))
                samples[BATCHED].append(_timed(batched))
        finally:
            close()
            shutil.rmtree(control.parent, ignore_errors=True)
    return {"runs": runs, "servers": servers, "agents": agents, "mode": MODE, "plain_login": plain_login,
            "samples": samples}


def table(result: dict[str, Any]) -> str:
    m = {label: median(s) for label, s in result["samples"].items()}
    lines = [f"| {result['servers']} servers, {result['agents']} agents each | median | vs local |", "|---|---|---|"]
    lines += [f"| {label} | {m[label]:.0f} ms | {m[label] / m[LOCAL]:.2f}x |" for label in m]
    return "\n".join(lines)


def target(result: dict[str, Any]) -> tuple[str, str, bool]:
    """The issue's target: warm remote status at most 2x local (the fan-out in one ssh session, as status does
    it; the unshared-session case is in the table)."""
    m = {label: median(s) for label, s in result["samples"].items()}
    warm = m[BATCHED] if BATCHED in m else m[WARM]
    return (f"status over {result['servers']} remote (loopback) tmux servers, warm, at most 2x local",
            f"{warm:.0f} ms vs {m[LOCAL]:.0f} ms ({warm / m[LOCAL]:.2f}x)", warm <= 2 * m[LOCAL])


def available() -> bool:
    """Whether this machine can run it: OpenSSH's server and client, and tmux."""
    return loopback.SSHD.exists() and shutil.which("ssh") is not None and shutil.which("tmux") is not None


def section(result: dict[str, Any]) -> str:
    name, measured, met = target(result)
    return "\n".join([
        f"## Remote hosts: `mam status` over {result['servers']} tmux servers through ssh to 127.0.0.1 "
        f"(`bench/remote_status.py`, {result['runs']} runs)",
        "",
        f"Target: {name}: {measured}, {'met' if met else '**missed**'}.",
        "",
        table(result),
        "",
        "Each command is a fresh `mam status --json --no-state` process, timed in turns: here, on the loopback "
        "host with no shared connection (the masters closed, untimed, before it), and again with one. The "
        "remote calls of one status share one ssh session (mam.calls.batch). On loopback every remote process (the ssh "
        "client, the sshd session, the login shell, tmux) shares this machine's CPU, so a real remote host costs "
        "its network round trips instead. `python3 bench/remote_status.py` runs it alone; MODE = \"api\" there "
        "times the fan-out without mam's own start-up.",
    ])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--user-rc", action="store_true", help="log in with this user's own HOME (and shell rc)")
    args = parser.parse_args()
    result = measure(args.servers, args.agents, args.runs, plain_login=not args.user_rc)
    print(table(result))
    name, measured, met = target(result)
    print(f"{name}: {measured}: {'met' if met else 'MISSED'}")
    if not met:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
