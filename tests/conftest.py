"""Shared fixtures: a private workspace, a fake herdr first on PATH, and `mam` run as a real process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

FAKES = Path(__file__).parent / "fakes"
# Variables of the developer's own session that must never reach a test's mam or fake.
_LEAKY_PREFIXES = ("MAM_", "HERDR_", "TMUX", "ZELLIJ", "CLAUDE", "CODEX_", "WORKSPACE_ROOT")
# The terminal's size, which mam's tables fit to: pytest-xdist sets COLUMNS=80 in its workers, so a test that
# wants a width sets it itself.
_TERMINAL = ("COLUMNS", "LINES")


def clean_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(_LEAKY_PREFIXES) and k not in _TERMINAL}


def base_env(home: Path, **variables: str) -> dict[str, str]:
    """The environment every test's mam, fake or backend runs in: the developer's session markers gone, HOME
    pinned, the fakes first on PATH (run on this very interpreter, found before any wrapper, which
    would cost start-up on every call), plus `variables`."""
    env = clean_environ()
    env.update({"HOME": str(home), "NO_COLOR": "1",
                "PATH": os.pathsep.join([str(FAKES), str(Path(sys.executable).parent),
                                         env.get("PATH", "/usr/bin:/bin")])})
    env.update(variables)
    return env


@dataclass
class FakeHerdr:
    config: Path  # $XDG_CONFIG_HOME
    env: dict[str, str]
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def root(self) -> Path:
        return self.config / "herdr"

    def session_dir(self, name: str) -> Path:
        return self.root if name == "default" else self.root / "sessions" / name

    def set_agents(self, name: str, agents: list[dict[str, Any]]) -> None:
        self.session_dir(name).mkdir(parents=True, exist_ok=True)
        (self.session_dir(name) / "agents.json").write_text(json.dumps(agents))

    def set_fault(self, name: str, command: str = "agent list", **fault: Any) -> None:
        self.session_dir(name).mkdir(parents=True, exist_ok=True)
        (self.session_dir(name) / "fault.json").write_text(json.dumps({command: fault}))

    def running(self, name: str) -> bool:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.session_dir(name) / "herdr.sock"))
            return True
        except OSError:
            return False
        finally:
            sock.close()

    def start(self, name: str, env: dict[str, str] | None = None) -> None:
        """Start a fake server as a user would have, outside mam (with `env`, else the workspace's), and wait
        until it listens."""
        proc = subprocess.Popen([str(FAKES / "herdr"), "--session", name, "server"], env=env or self.env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        self.started.append(proc)
        deadline = time.monotonic() + 10
        while not self.running(name):
            assert time.monotonic() < deadline, "fake herdr server did not come up"
            time.sleep(0.02)

    def stop(self, name: str) -> None:
        for entry in self.calls():
            if entry["argv"][-1:] == ["server"] and name in entry["argv"]:
                try:
                    os.kill(entry["pid"], signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        while self.running(name):
            assert time.monotonic() < deadline
            time.sleep(0.02)

    def calls(self) -> list[dict[str, Any]]:
        path = self.root / "fake-calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def server_starts(self) -> list[dict[str, Any]]:
        return [c for c in self.calls() if c["argv"][-1:] == ["server"]]

    def cleanup(self) -> None:
        for entry in self.server_starts():
            try:
                os.kill(entry["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.started:
            proc.kill()
            proc.wait()


@dataclass
class Workspace:
    root: Path
    env: dict[str, str]
    herdr: FakeHerdr

    @property
    def registry(self) -> Path:
        return self.root / ".mam" / "agent-sessions.yaml"

    def write_registry(self, text: str) -> None:
        self.registry.parent.mkdir(parents=True, exist_ok=True)
        self.registry.write_text(text)

    def write_config(self, text: str) -> None:
        (self.root / ".mam").mkdir(exist_ok=True)
        (self.root / ".mam" / "config.yaml").write_text(text)

    def mam(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mam", *args], env=env or self.env, cwd=cwd or self.root,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def mam_json(self, *args: str, env: dict[str, str] | None = None, expect: int = 0) -> dict[str, Any]:
        proc = self.mam(*args, "--json", env=env)
        assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
        doc: dict[str, Any] = json.loads(proc.stdout)
        return doc


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Workspace]:
    # A short path: Unix socket paths are limited to about 108 bytes.
    config = Path(tempfile.mkdtemp(prefix="mh", dir="/tmp"))
    home = tmp_path / "home"
    home.mkdir()
    root = tmp_path / "project"
    root.mkdir()
    env = base_env(home, XDG_CONFIG_HOME=str(config), MAM_WORKSPACE=str(root),
                   ZELLIJ_SOCKET_DIR=str(tmp_path / "zellij"), TMUX_TMPDIR=str(config), MAM_TIMEOUT="5")
    herdr = FakeHerdr(config, env)
    try:
        yield Workspace(root, env, herdr)
    finally:
        herdr.cleanup()
        shutil.rmtree(config, ignore_errors=True)


@pytest.fixture(scope="session")
def echo_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The third-party test backend tests/plugins/mam-echo, installed with pip into its own folder."""
    target = tmp_path_factory.mktemp("echo-site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(Path(__file__).parent / "plugins" / "mam-echo")], check=True, timeout=300,
                   capture_output=True)
    return target


@dataclass
class Tmux:
    tmpdir: Path  # $TMUX_TMPDIR: every socket of the test lives below it, never the default one
    env: dict[str, str]
    servers: set[str] = field(default_factory=set)

    def name(self) -> str:
        server = f"mam-test-{uuid.uuid4().hex[:8]}"
        self.servers.add(server)
        return server

    def run(self, server: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        self.servers.add(server)
        return subprocess.run(["tmux", "-L", server, "-f", "/dev/null", *args], env=self.env, capture_output=True,
                              text=True, timeout=20, check=check, stdin=subprocess.DEVNULL)

    def agent(self, server: str, name: str, cwd: str = "/", command: str = "sleep 600") -> None:
        self.run(server, "new-session", "-d", "-s", name, "-c", cwd, command)

    @property
    def socket_dir(self) -> Path:
        return self.tmpdir / f"tmux-{os.getuid()}"

    def sockets(self) -> list[str]:
        return sorted(p.name for p in self.socket_dir.iterdir()) if self.socket_dir.exists() else []

    def pane_env(self, server: str, target: str) -> dict[str, str]:
        pid = self.run(server, "list-panes", "-t", target, "-F", "#{pane_pid}").stdout.split()[0]
        raw = Path(f"/proc/{pid}/environ").read_bytes()
        return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)

    def cleanup(self) -> None:
        for server in self.servers:
            subprocess.run(["tmux", "-L", server, "kill-server"], env=self.env, capture_output=True, timeout=20,
                           stdin=subprocess.DEVNULL)
        shutil.rmtree(self.tmpdir, ignore_errors=True)


@pytest.fixture
def tmux(ws: Workspace) -> Iterator[Tmux]:
    tmpdir = Path(tempfile.mkdtemp(prefix="mt", dir="/tmp"))  # short: socket paths are limited
    ws.env.update({"TMUX_TMPDIR": str(tmpdir), "MAM_TMUX_CONFIG": "/dev/null", "MAM_BACKEND": "tmux"})
    t = Tmux(tmpdir, ws.env)
    try:
        yield t
    finally:
        t.cleanup()


# Whole suites that take long by design: faults wait out time limits, properties run many examples, the
# benchmark smoke test runs the benchmarks.
SLOW_MODULES = frozenset({"test_faults.py", "test_properties.py", "test_bench.py",
                          "test_restore_tmux.py", "test_state_tmux.py"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on real tmux servers are marked `tmux` and `slow`, as are the slow suites: `-m "not slow"` is the
    quick loop."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        on_tmux = ("tmux" in fixtures or item.get_closest_marker("tmux") is not None
                   or "[tmux" in item.nodeid or "Tmux" in item.nodeid)
        if "sshd" in fixtures or "remote" in fixtures:  # a real sshd (and real tmux behind it)
            item.add_marker(pytest.mark.slow)
        if on_tmux:
            item.add_marker(pytest.mark.tmux)
        if on_tmux or item.path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


from sshd import sshd_fixture  # noqa: E402,F401 - the real-sshd fixture `sshd` (tests/sshd.py)
