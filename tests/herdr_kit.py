"""One herdr for one test, the fake or the real program (the `hd` fixture in tests/conftest.py).

The real herdr is whichever `herdr` is on PATH when its version is one mam supports (docs/backends.md says how
to build one by hand); nothing here names where it is installed. It runs headless (`herdr --session NAME
server`) under the workspace's private HOME and $XDG_CONFIG_HOME, with its network checks off, and everything it
started is killed at the end. Its agents are the stand-in Claude Code (tests/agents/herdr/claude), which herdr
detects; the fake's agents are its own knobs. The methods say the same thing to both."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FAKES = Path(__file__).parent / "fakes"
STANDIN_BIN = Path(__file__).parent / "agents" / "herdr"
# The real herdr's network checks off: it has no network in the tests, and a test never waits on one.
CONFIG = "[update]\nversion_check = false\nmanifest_check = false\n"


def real_herdr(path: str) -> tuple[str | None, str]:
    """The first `herdr` on `path` (the fakes' folder left out) when mam supports its version, else None and
    why not."""
    from mam_herdr.backend import is_supported

    search = os.pathsep.join(p for p in path.split(os.pathsep) if p and Path(p) != FAKES)
    found = shutil.which("herdr", path=search)
    if found is None:
        return None, "no herdr on PATH"
    try:
        out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=20,
                             stdin=subprocess.DEVNULL).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{found} --version failed: {exc}"
    if not is_supported(out):
        return None, f"{found} is {out!r}, a herdr release mam does not support"
    return found, out


@dataclass
class HerdrKit:
    kind: str  # fake | real
    env: dict[str, str]
    config: Path  # $XDG_CONFIG_HOME: herdr's sessions live in config/herdr/sessions/NAME
    servers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def root(self) -> Path:
        return self.config / "herdr"

    def session_dir(self, name: str) -> Path:
        return self.root / "sessions" / name

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["herdr", *args], env=self.env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(["herdr", *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, stdin=subprocess.DEVNULL)

    def json(self, *args: str) -> dict[str, Any]:
        done = self.run(*args)
        assert done.returncode == 0, (args, done.returncode, done.stdout, done.stderr)
        doc: dict[str, Any] = json.loads(done.stdout)
        return doc

    def running(self, name: str) -> bool:
        done = self.run("session", "list", "--json")
        return any(s["name"] == name and s["running"] for s in json.loads(done.stdout)["sessions"])

    def start(self, name: str) -> None:
        """A server started as a user starts one, outside mam; waits until it answers."""
        log = open(self.config / f"server-{name}.log", "ab")
        self.servers.append(subprocess.Popen(["herdr", "--session", name, "server"], env=self.env, stdout=log,
                                             stderr=log, stdin=subprocess.DEVNULL, start_new_session=True))
        log.close()
        self.wait(lambda: self.run("--session", name, "agent", "list").returncode == 0, f"{name} did not come up")

    def kill(self, name: str) -> None:
        """The server dies (SIGKILL), as a crash or an OOM kill would end it; its panes' programs go with it."""
        pid = self.server_pid(name)
        os.kill(pid, signal.SIGKILL)
        self.wait(lambda: not _alive(pid), "the server did not die")
        for pane in self.pane_processes(name):
            try:
                os.kill(pane, signal.SIGKILL)
            except OSError:
                pass

    def server_pid(self, name: str) -> int:
        for pid, argv in _processes(self.env_marker()).items():
            if argv[-3:] == ["--session", name, "server"] or argv[-2:] == [f"--session={name}", "server"]:
                return pid
        raise AssertionError(f"no server for {name}")

    def env_marker(self) -> str:
        return f"XDG_CONFIG_HOME={self.config}"

    def pane_processes(self, name: str) -> list[int]:
        socket = f"HERDR_SOCKET_PATH={self.session_dir(name) / 'herdr.sock'}"
        return list(_processes(socket))

    def agents(self, name: str) -> list[dict[str, Any]]:
        agents: list[dict[str, Any]] = self.json("--session", name, "agent", "list")["result"]["agents"]
        return agents

    def agent(self, name: str, agent: str) -> dict[str, Any] | None:
        return next((a for a in self.agents(name) if a.get("name") == agent), None)

    def standin(self, log: Path, control: Path, outcome: str = "ready") -> list[str]:
        """The stand-in's arguments (after `--`) for an `agent start` that ends as `outcome`: ready, blocked (a
        start-up dialog), exited (its program ends at once), mismatch (herdr finds codex, not claude). The
        fake's start knobs say the same to the fake."""
        if self.kind == "fake":
            for name in self._sessions():
                (self.session_dir(name) / "start.json").write_text(json.dumps({"outcome": outcome}))
            # a program that exits is listed for its first second (the real one's exits after 0.5 s)
            settle = 1.0 if outcome == "exited" else 0.3
            (self.root / "fake-start.json").write_text(json.dumps({"settle": settle, "outcome": outcome}))
        extra = {"ready": [], "blocked": ["--state", "blocked"], "exited": ["--exit-after", "0.5"],
                 "mismatch": ["--as", "codex"]}[outcome]
        return ["--log", str(log), "--control", str(control), *extra]

    def _sessions(self) -> list[str]:
        folder = self.root / "sessions"
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []

    def set_state(self, name: str, agent: str, control: Path, state: str) -> None:
        """The agent draws `state` (idle, working, blocked): the stand-in through its control file, the fake's
        listing through its agents file."""
        control.write_text(state)
        if self.kind == "real":
            return
        path = self.session_dir(name) / "agents.json"
        entries = json.loads(path.read_text())
        for entry in entries:
            if entry.get("name") == agent:
                entry.pop("_start", None)
                entry.update({"agent_status": state, "interactive_ready": True})
                entry.pop("launch_pending", None)
        path.write_text(json.dumps(entries))

    def received(self, name: str, pane: str, log: Path) -> str:
        """What the agent's terminal read, Enter as <Enter>: the stand-in's log, or what the fake says it typed."""
        if self.kind == "real":
            try:
                return log.read_bytes().decode(errors="replace").replace("\r", "<Enter>")
            except OSError:
                return ""
        path = self.session_dir(name) / f"typed-{pane.replace(':', '_')}.txt"
        return path.read_text() if path.exists() else ""

    def wait(self, check: Callable[[], object], what: str, limit: float = 30) -> None:
        deadline = time.monotonic() + limit
        while not check():
            assert time.monotonic() < deadline, what
            time.sleep(0.1)

    def cleanup(self) -> None:
        """Every server stopped, then anything still running with this kit's config folder or sockets killed."""
        for name in self._sessions():
            if self.kind == "real":
                self.run("--session", name, "server", "stop", timeout=20)
        deadline = time.monotonic() + 10
        while True:
            left = [pid for pid in _processes(self.env_marker()) if pid != os.getpid()]
            for name in self._sessions():
                left += self.pane_processes(name)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL if time.monotonic() > deadline - 8 else signal.SIGTERM)
                except OSError:
                    pass
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for proc in self.servers:
            proc.kill()
            proc.wait()


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _processes(marker: str) -> dict[int, list[str]]:
    """Live processes whose environment holds `marker` (VAR=value), with their argv."""
    needle = marker.encode()
    found: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0") or not _alive(int(entry.name)):
                continue
            found[int(entry.name)] = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
        except OSError:
            continue
    return found
