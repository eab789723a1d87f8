"""The fault suite: every backend's binary hanging, crashing, printing garbage, failing with each message its
reference lists and with unknown ones, vanishing between calls, and its server killed during a listing.

In every case mam must give the right state (`unknown` unless the backend itself said `down`), no traceback,
start no server from a query, and leave the registry's bytes as they were.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import FAKES, Workspace

BACKENDS = ("herdr", "tmux", "zellij")


@dataclass
class Rig:
    """Two live servers of one backend, each with one registered running agent, and a way to break the
    backend's binary."""

    backend: str
    ws: Workspace
    bin_dir: Path
    servers: tuple[str, str]
    real: str
    log: Path
    server_pids: list[int] = field(default_factory=list)

    def break_binary(self, mode: str, **plan: Any) -> dict[str, str]:
        """Put the faulty stand-in first on PATH under the backend's name; the environment to run mam in."""
        self.bin_dir.mkdir(exist_ok=True)
        shutil.copy(FAKES / "faulty", self.bin_dir / self.backend)
        # The agent's program: tmux and zellij refuse a spawn of a program they would not find
        (self.bin_dir / "claude").write_text("#!/bin/sh\nexec /bin/sleep 600\n")
        (self.bin_dir / "claude").chmod(0o755)
        plan_path = self.bin_dir / "plan.json"
        plan_path.write_text(json.dumps({"mode": mode, "real": self.real, "log": str(self.log), **plan}))
        # Only the stand-in and python (which runs it) on PATH: once it is gone, no other copy is found.
        python_dir = Path(sys.executable).parent
        return {**self.ws.env, "PATH": f"{self.bin_dir}:{python_dir}", "FAULTY_PLAN": str(plan_path),
                "MAM_BACKEND": self.backend, "MAM_TIMEOUT": "1" if mode == "hang" else "3",
                "MAM_BOOTSTRAP_TIMEOUT": "2"}

    def calls(self) -> list[list[str]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def assert_no_server_start(self) -> None:
        calls = self.calls()
        assert calls, "the broken binary was never called"
        if self.backend == "herdr":
            assert not [c for c in calls if c[-1:] == ["server"]], calls
        elif self.backend == "tmux":
            assert all("-N" in c for c in calls if c != ["-V"]), calls
        else:
            assert not [c for c in calls if "attach" in c], calls


def _tmux_pid(ws: Workspace, server: str) -> int:
    out = subprocess.run(["tmux", "-L", server, "display-message", "-p", "#{pid}"], env=ws.env, capture_output=True,
                         text=True, timeout=20, check=True, stdin=subprocess.DEVNULL)
    return int(out.stdout.strip())


@pytest.fixture(params=BACKENDS)
def rig(request: pytest.FixtureRequest, ws: Workspace, tmp_path: Path) -> Iterator[Rig]:
    backend: str = request.param
    suffix = f"{time.monotonic_ns() % 10**8}"
    servers = (f"one-{suffix}", f"two-{suffix}")
    ws.write_registry("version: 1\nsessions:\n" + "".join(
        f"  - {{name: agent-{i}, backend: {backend}, server: {s}, status: running}}\n"
        for i, s in enumerate(servers)))
    pids: list[int] = []
    if backend == "herdr":
        for i, s in enumerate(servers):
            ws.herdr.start(s)  # a starting server restores only resumable agents: these come after it
            ws.herdr.set_agents(s, [{"name": f"agent-{i}", "agent": "claude", "agent_status": "idle",
                                     "pane_id": "w1:p1", "tab_id": "w1:t1", "workspace_id": "w1",
                                     "terminal_id": "term_1", "focused": False, "revision": 1,
                                     "state_change_seq": 1}])
        pids = [e["pid"] for e in ws.herdr.server_starts()] + [p.pid for p in ws.herdr.started]
        real = str(FAKES / "herdr")
    elif backend == "tmux":
        ws.env["MAM_TMUX_CONFIG"] = "/dev/null"
        for i, s in enumerate(servers):
            subprocess.run(["tmux", "-L", s, "-f", "/dev/null", "new-session", "-d", "-s", f"agent-{i}",
                            "sleep 600"], env=ws.env, check=True, timeout=20, stdin=subprocess.DEVNULL)
            pids.append(_tmux_pid(ws, s))
        real = shutil.which("tmux") or "/usr/bin/tmux"
    else:
        state_dir = Path(ws.env["ZELLIJ_SOCKET_DIR"])
        state_dir.mkdir(parents=True, exist_ok=True)
        now = time.time() - 60
        sessions = {s: {"created": now, "exited": False, "panes": [
            {"id": 1, "plugin": False, "name": None, "title": f"agent-{i}", "command": ["claude"], "cwd": "/repo",
             "held": None}]} for i, s in enumerate(servers)}  # the fake's own form of a pane
        (state_dir / "fake-state.json").write_text(json.dumps({"sessions": sessions, "faults": {}}))
        real = str(FAKES / "zellij")
    rig = Rig(backend, ws, tmp_path / "faulty-bin", servers, real, tmp_path / "faulty-calls.jsonl", pids)
    try:
        yield rig
    finally:
        if backend == "tmux":
            for s in servers:
                subprocess.run(["tmux", "-L", s, "kill-server"], env=ws.env, capture_output=True, timeout=20,
                               stdin=subprocess.DEVNULL)


def _queries(rig: Rig, env: dict[str, str]) -> list[tuple[list[str], subprocess.CompletedProcess[str]]]:
    return [(args, rig.ws.mam(*args, env=env)) for args in (
        ["status", "--json"], ["reconcile", "--json"], ["ls", "--server", rig.servers[0], "--json"])]


def _outcomes(args: list[str], proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    return [doc["server"]] if args[0] == "ls" else list(doc["servers"])


# (mode, plan, the error kind every server must get)
UNREADABLE = {
    "hang": ("hang", {}, "timeout"),
    "crash": ("crash", {}, "unknown"),
    "garbage": ("garbage", {}, "bad_output"),
    "unknown message": ("fail", {"stderr": "something went sideways\n", "exit": 1}, "unknown"),
    "unknown exit code, silent": ("fail", {"exit": 127}, "unknown"),
    "down words on stdout, exit 3": ("fail", {"stdout": "no server running on x server_not_running\n",
                                              "exit": 3}, "unknown"),
}


@pytest.mark.parametrize("fault", UNREADABLE.values(), ids=list(UNREADABLE))
def test_a_binary_that_gives_no_readable_answer_is_unknown(rig: Rig, fault: tuple[str, dict[str, Any], str]) -> None:
    mode, plan, kind = fault
    env = rig.break_binary(mode, **plan)
    before = rig.ws.registry.read_bytes()
    started = time.monotonic()
    for args, proc in _queries(rig, env):
        assert proc.returncode == (1 if args[0] == "ls" else 0), (args, proc.stderr)
        for outcome in _outcomes(args, proc):
            assert (outcome["state"], outcome["agents"], outcome["error"]["kind"]) == ("unknown", None, kind)
        if args[0] == "reconcile":
            doc = json.loads(proc.stdout)
            assert doc["confirmed"] is False and doc["drifts"] == []  # unknown rows never drift
            assert len(doc["unconfirmed"]) == 2
    assert time.monotonic() - started < 30  # a hanging binary costs one time limit per command, not more
    assert rig.ws.registry.read_bytes() == before
    rig.assert_no_server_start()


# What each backend's reference lists, as its binary prints it: (stdout, stderr, exit, state, kind).
KNOWN: dict[str, list[tuple[str, str, int, str, str]]] = {
    "herdr": [
        ("", '{"id":"cli:agent:list","error":{"code":"server_not_running","message":"no herdr server is running '
             'at /x/herdr.sock; run `herdr session attach x` to start or attach it"}}\n', 1, "down", "server_down"),
        ("", '{"error":{"code":"protocol_mismatch","message":"client protocol 22, server 20"},'
             '"id":"cli:agent:list"}\n', 1, "unknown", "protocol_mismatch"),
        ("", '{"error":{"code":"server_unavailable","message":"shutting down"},"id":"cli:agent:list"}\n', 1,
         "unknown", "unknown"),
        ("", '{"error":{"code":"internal_error","message":"boom"},"id":"cli:agent:list"}\n', 1, "unknown",
         "unknown"),
        ("", '{"error":{"code":"timeout","message":"no answer in 5 s"},"id":"cli:agent:list"}\n', 1, "unknown",
         "unknown"),
        ("", 'Error: Os { code: 2, kind: NotFound, message: "No such file or directory" }\n', 1, "unknown",
         "unknown"),
        ("", "unknown option: --json\nrun 'herdr --help' for usage\n", 2, "unknown", "unknown"),
        ("", "warning: config ignored\n" '{"error":{"code":"server_not_running","message":"m"},"id":"x"}\n', 1,
         "unknown", "unknown"),
    ],
    "tmux": [
        ("", "no server running on /tmp/tmux-0/x\n", 1, "down", "server_down"),
        ("", "error connecting to /tmp/tmux-0/x (No such file or directory)\n", 1, "down", "server_down"),
        # These two name no socket: the rig's real server still listens at its own, so they prove nothing.
        ("", "server exited unexpectedly\n", 1, "unknown", "unknown"),
        ("", "lost server\n", 1, "unknown", "unknown"),
        ("", "error connecting to /tmp/tmux-0/x (Permission denied)\n", 1, "unknown", "permission"),
        ("", "error connecting to /tmp/tmux-0/x (File name too long)\n", 1, "unknown", "unknown"),
        ("", "error connecting to /tmp/tmux-0/x (Not a directory)\n", 1, "unknown", "unknown"),
        ("", "directory /tmp/tmux-0 has unsafe permissions\n", 1, "unknown", "unknown"),
        ("", "couldn't create directory /tmp/tmux-0 (Read-only file system)\n", 1, "unknown", "unknown"),
        ("", "unknown option -- N\nusage: tmux [-2CDlNuVv] ...\n", 1, "unknown", "unknown"),
    ],
    "zellij": [
        ("", "No active zellij sessions found.\n", 1, "down", "server_down"),
        ("{s} [Created 2m 1s ago] (EXITED - attach to resurrect)\n", "", 0, "down", "server_down"),
        ("other [Created 2m 1s ago] \n", "", 0, "down", "server_down"),
        ("", "Error occurred: PermissionDenied\n", 1, "unknown", "unknown"),
        ("{s} [Created 2m 1s ago] \n", "", 0, "unknown", "bad_output"),  # then list-panes prints the same
        ("", "There is no active session!\n", 0, "unknown", "bad_output"),
    ],
}


@pytest.mark.parametrize(("rig", "case"), [(b, c) for b, cases in KNOWN.items() for c in cases], indirect=["rig"],
                         ids=[f"{b}-{c[1][:40] or c[0][:40]}" for b, cases in KNOWN.items() for c in cases])
def test_each_known_message_gives_the_state_its_reference_says(rig: Rig, case: tuple[str, str, int, str, str]) -> None:
    stdout, stderr, code, state, kind = case
    env = rig.break_binary("fail", stdout=stdout.replace("{s}", rig.servers[0]), stderr=stderr, exit=code)
    before = rig.ws.registry.read_bytes()
    proc = rig.ws.mam("ls", "--server", rig.servers[0], "--json", env=env)
    outcome = _outcomes(["ls"], proc)[0]
    assert (outcome["state"], outcome["error"]["kind"]) == (state, kind), outcome
    assert outcome["agents"] == (0 if state == "down" else None)
    assert proc.returncode == (0 if state == "down" else 1)
    doc = json.loads(rig.ws.mam("reconcile", "--json", env=env).stdout)
    first = rig.servers[0]  # (a zellij listing that names one session tells of the other one too)
    assert [d["class"] for d in doc["drifts"] if d["server"] == first] == (["A"] if state == "down" else [])
    assert (f"agent-0|{first}" in doc["unconfirmed"]) is (state == "unknown")
    assert rig.ws.registry.read_bytes() == before
    rig.assert_no_server_start()


def test_a_binary_that_vanishes_between_calls(rig: Rig) -> None:
    env = rig.break_binary("vanish")
    before = rig.ws.registry.read_bytes()
    # One server first, so the calls are in turn: a parallel status let one call's interpreter re-open the
    # script just as another call removed it ("can't open file": unknown), a race of the stand-in, not of mam.
    first = rig.ws.mam("ls", "--server", rig.servers[0], "--json", env=env)
    answer = json.loads(first.stdout)
    if "error" in answer and "server" not in answer:  # zellij asks twice: the second call found no binary
        assert (first.returncode, answer["error"]["code"]) == (3, "backend_unavailable"), answer
    else:
        assert (answer["server"]["state"], answer["server"]["agents"]) == ("up", 1), answer
    assert not (rig.bin_dir / rig.backend).exists()
    for args in (["status", "--json"], ["reconcile", "--json"]):  # every server unknown; exit 3, said first
        proc = rig.ws.mam(*args, env=env)
        assert proc.returncode == 3, (args, proc.stderr)
        assert f"install {rig.backend}" in proc.stderr
        for outcome in _outcomes(args, proc):
            assert (outcome["state"], outcome["error"]["kind"]) == ("unknown", "not_installed"), outcome
    for args in (["ls", "--server", rig.servers[0]], ["bootstrap", "--server", "three"]):  # they need it: exit 3
        proc = rig.ws.mam(*args, "--json", env=env)
        assert proc.returncode == 3 and proc.stderr.startswith("mam: ") and "Traceback" not in proc.stderr
        assert json.loads(proc.stdout)["error"]["code"] == "backend_unavailable"
    assert rig.ws.registry.read_bytes() == before


def test_a_binary_that_vanishes_during_a_bootstrap(rig: Rig) -> None:
    env = rig.break_binary("vanish")
    proc = rig.ws.mam("bootstrap", "--server", "three", "--json", env=env)
    assert "Traceback" not in proc.stderr
    assert len(rig.calls()) == 1  # the probe ran (and said "down"); then the binary was gone for the start
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith(f"mam: {rig.backend}: not found on PATH") and len(proc.stderr.splitlines()) == 2
    assert json.loads(proc.stdout)["error"]["code"] == "backend_unavailable"


@pytest.mark.parametrize(("rig", "after"), [(b, a) for b in ("herdr", "tmux") for a in (0.0, 0.005, 0.05)]
                         + [("zellij", 0.0)], indirect=["rig"])
def test_a_server_killed_during_a_listing(rig: Rig, after: float) -> None:
    if rig.backend == "zellij":  # no server process in the fake: its sessions exit between the two calls
        state = Path(rig.ws.env["ZELLIJ_SOCKET_DIR"]) / "fake-state.json"
        env = rig.break_binary("exit-sessions", only=["list-panes"], state=str(state))
        env["PATH"] = f"{rig.bin_dir}:{rig.ws.env['PATH']}"
    else:
        env = rig.break_binary("kill-server", pids=rig.server_pids, after=after)
    before = rig.ws.registry.read_bytes()
    proc = rig.ws.mam("status", "--json", env=env)
    assert proc.returncode == 0
    for outcome in _outcomes(["status"], proc):  # what the server managed to say, or that it is gone
        assert outcome["state"] in ("up", "down", "unknown"), outcome
        if outcome["state"] == "up":
            assert outcome["agents"] == 1
        if outcome["state"] == "unknown":
            assert outcome["error"]["kind"] in ("unknown", "bad_output"), outcome
    # Once the servers are dead, the real binary's own signal says so: down, not unknown, and never a start.
    for _ in range(50):
        doc = rig.ws.mam_json("status", env={**rig.ws.env, "MAM_BACKEND": rig.backend})
        if all(s["state"] == "down" for s in doc["servers"]):
            break
        time.sleep(0.1)
    assert [s["state"] for s in doc["servers"]] == ["down", "down"], doc["servers"]
    assert rig.ws.registry.read_bytes() == before
    rig.assert_no_server_start()


SPAWN_CALL = {"herdr": ["agent", "start"], "tmux": ["new-session"], "zellij": ["run"]}


def _row(rig: Rig, name: str) -> dict[str, Any] | None:
    import yaml

    rows = yaml.safe_load(rig.ws.registry.read_text())["sessions"]
    return next((r for r in rows if r["name"] == name), None)


@pytest.mark.parametrize("mode", ["hang", "crash"])
def test_a_spawn_with_no_clear_answer_stays_starting_until_reconcile_settles_it(rig: Rig, mode: str) -> None:
    env = rig.break_binary(mode, only=SPAWN_CALL[rig.backend])
    env["PATH"] = f"{rig.bin_dir}:{rig.ws.env['PATH']}"  # the fakes and tools beside the broken call
    proc = rig.ws.mam("spawn", "newbie", "--agent", "claude", "--server", rig.servers[0], "--json", env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "no clear answer" in proc.stderr and "hint: it stays registered as starting" in proc.stderr
    assert _row(rig, "newbie")["status"] == "starting"  # type: ignore[index]  # never recorded as gone
    # What the server lists settles it: the broken call never reached it, so the agent is absent.
    doc = rig.ws.mam_json("reconcile", "--apply", env={**rig.ws.env, "MAM_BACKEND": rig.backend})
    assert [(d["name"], d["class"]) for d in doc["drifts"]] == [("newbie", "A")]
    assert _row(rig, "newbie")["status"] == "terminated"  # type: ignore[index]


def test_a_spawn_the_backend_refuses_is_recorded_terminated_with_its_reason(rig: Rig) -> None:
    env = rig.break_binary("fail", only=SPAWN_CALL[rig.backend], stderr="refused: no room for panes\n", exit=1)
    env["PATH"] = f"{rig.bin_dir}:{rig.ws.env['PATH']}"
    proc = rig.ws.mam("spawn", "newbie", "--agent", "claude", "--server", rig.servers[0], env=env)
    assert proc.returncode == 1 and proc.stderr.startswith("mam: ") and "Traceback" not in proc.stderr
    row = _row(rig, "newbie")
    assert row is not None and row["status"] == "terminated"
    assert "refused: no room for panes" in row["terminated_reason"]


def test_a_spawn_answered_with_garbage_is_never_recorded_as_running(rig: Rig) -> None:
    env = rig.break_binary("garbage", only=SPAWN_CALL[rig.backend])
    env["PATH"] = f"{rig.bin_dir}:{rig.ws.env['PATH']}"
    proc = rig.ws.mam("spawn", "newbie", "--agent", "claude", "--server", rig.servers[0], env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    row = _row(rig, "newbie")
    assert row is not None
    if rig.backend in ("herdr", "zellij"):  # they read agent start's JSON, run's pane id: unreadable is unknown
        assert row["status"] == "starting" and "no clear answer" in proc.stderr  # until reconcile asks
    else:  # tmux takes exit 0 as started; then the server's own listing says it is not there
        assert row["status"] == "terminated"
        assert row["terminated_reason"] == "started, but its server never listed it"
