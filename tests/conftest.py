"""Shared fixtures: a private workspace, a fake herdr first on PATH, and `mam` run as a real process."""

from __future__ import annotations

import atexit
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

# The backend kit's fixtures, and its report of what it did not test of each backend (here: also under xdist).
pytest_plugins = ["mam.testing.pytest_plugin"]
# tests/plugins/* are packages of their own: their tests run installed, through tests/test_kit.py.
collect_ignore_glob = ["plugins/*"]

FAKES = Path(__file__).parent / "fakes"
# Variables of the developer's own session that must never reach a test's mam or fake.
_LEAKY_PREFIXES = ("MAM_", "HERDR_", "TMUX", "ZELLIJ", "CLAUDE", "CODEX_", "WORKSPACE_ROOT")
# The terminal's size, which mam's tables fit to: pytest-xdist sets COLUMNS=80 in its workers, so a test that
# wants a width sets it itself.
_TERMINAL = ("COLUMNS", "LINES")


# ssh's ControlPath sockets of a workspace whose path is too long for a socket path (every pytest tmp path) go to
# $XDG_RUNTIME_DIR/mam-ssh, else to /tmp/mam-ssh-UID, which every test worker would share: one worker's
# `ssh -O exit` (a test's teardown) then ended another worker's master in the middle of a call, which ssh reports
# by exiting 255 without a word. One short folder per worker (the workers are processes; each imports this file),
# set before any test runs, for the tests' own processes and for mam's code run inside the worker alike.
RUNTIME_DIR = Path(tempfile.mkdtemp(prefix="mamrun-", dir="/tmp"))
os.environ["XDG_RUNTIME_DIR"] = str(RUNTIME_DIR)


def _end_runtime_dir() -> None:
    """The worker's shared ssh connections end with it (they would linger for ControlPersist), then its folder."""
    _end_ssh_masters()
    shutil.rmtree(RUNTIME_DIR, ignore_errors=True)


atexit.register(_end_runtime_dir)

# Every process a test starts in base_env's environment carries this mark, one value per pytest process (each
# xdist worker imports this file on its own): what is left of them when the worker's tests are over is what its
# tests left behind, and no other run on this machine carries the same value (pytest_sessionfinish below).
RUN_MARK = ("MAM_TEST_RUN", uuid.uuid4().hex)


def clean_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(_LEAKY_PREFIXES) and k not in _TERMINAL}


def base_env(home: Path, **variables: str) -> dict[str, str]:
    """The environment every test's mam, fake or backend runs in: the developer's session markers gone, HOME
    pinned, the fakes first on PATH (run on this very interpreter, found before any wrapper, which
    would cost start-up on every call), plus `variables`."""
    env = clean_environ()
    env.update({"HOME": str(home), "NO_COLOR": "1", RUN_MARK[0]: RUN_MARK[1],
                "PATH": os.pathsep.join([str(FAKES), str(Path(sys.executable).parent),
                                         env.get("PATH", "/usr/bin:/bin")])})
    env.update(variables)
    return env


def mounted_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A small filesystem of its own at `folder` (`size`, e.g. "64k"), that a test can fill or make read-only;
    the test is skipped where no tmpfs can be mounted. Unmounted at the end."""
    mount_point = folder / "fs"
    mount_point.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
                          capture_output=True, text=True, timeout=20)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=20)


def fill(root: Path) -> Path:
    """Fill the filesystem of `root` (a `mounted_tmpfs`) to its last byte; the file that fills it is returned, to
    free it."""
    filler = root / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"x" * 512):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


QUICK_SETTLE = 0.3  # the fake herdr's `agent start` settle delay in most tests (herdr's own is 3 s)



def live_processes_with(variable: str, value: str) -> dict[int, str]:
    """Live (not zombie) processes whose environment holds `variable`=`value`, by pid, with their command line:
    whatever one test started, at any depth, whatever other runs on this machine are doing."""
    needle = f"{variable}={value}".encode()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return found


def end_processes_with(variable: str, value: str, limit: float = 10) -> None:
    """Every process whose environment holds `variable`=`value` ended: asked (SIGTERM) for 2 s, then killed."""
    deadline = time.monotonic() + limit
    while left := [pid for pid in live_processes_with(variable, value) if pid != os.getpid()]:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL if time.monotonic() > deadline - limit + 2 else signal.SIGTERM)
            except OSError:
                pass
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)


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

    def quick_starts(self, settle: float | None = QUICK_SETTLE) -> None:
        """`agent start` waits `settle` seconds for the agent to be ready instead of herdr's own 3 s (None: the
        fake's default, herdr's), so that the suite stays quick; the start is blocking and fails as herdr's does."""
        path = self.root / "fake-start.json"
        if settle is None:
            path.unlink(missing_ok=True)
            return
        self.root.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"settle": settle}))

    def set_start(self, name: str, **knobs: Any) -> None:
        """How the next `agent start`s on session `name` go: settle, ready_after (seconds), outcome (ready,
        blocked, exited, mismatch, never)."""
        self.session_dir(name).mkdir(parents=True, exist_ok=True)
        (self.session_dir(name) / "start.json").write_text(json.dumps(knobs))

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
    herdr.quick_starts()
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

    def agent(self, server: str, name: str, cwd: str = "/", command: str = "sleep 600", mam: bool = False) -> None:
        """A session made by hand; with `mam`, marked as mam's spawn marks its own (`@mam_pane`), so that a stop
        closes it."""
        mark = [";", "set-option", "-F", "@mam_pane", "#{pane_id}"] if mam else []
        self.run(server, "new-session", "-d", "-s", name, "-c", cwd, command, *mark)

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


# The zellij release the tests run on beside the fake (`.ci/run` installs it with cargo): the real variant of
# the `zj` fixture is skipped only when that version is not on PATH (nor in ~/.cargo/bin).
ZELLIJ_VERSION = "0.45.1"
# The real zellij, headless and private: no plugin (one shell pane: the fake's bar plugins stand for them), no
# tips, release notes or web server, and the layout written down every second (60 s by default), so that a
# killed session can be resurrected in a test.
ZELLIJ_CONFIG = """show_startup_tips false
show_release_notes false
session_serialization true
serialization_interval 1
pane_frames false
web_server false
default_layout "single"
"""
ZELLIJ_LAYOUT = "layout {\n    pane\n}\n"


def real_zellij() -> str | None:
    """The path of the pinned zellij release, or None."""
    search = os.pathsep.join([os.path.expanduser("~/.cargo/bin"),
                              *[p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != FAKES]])
    found = shutil.which("zellij", path=search)
    if found is None:
        return None
    try:
        out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return found if out.split() == ["zellij", ZELLIJ_VERSION] else None


@dataclass
class ZellijKit:
    """One private zellij for one test: the fake, or the real one on its own socket folder, HOME, XDG folders and
    config. `env` is the workspace's environment (mam runs in it); every session is killed at the end."""

    kind: str  # fake | real
    env: dict[str, str]
    root: Path

    @property
    def socket_dir(self) -> Path:
        return Path(self.env["ZELLIJ_SOCKET_DIR"])

    def run(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in self.env.items() if k not in ("ZELLIJ", "ZELLIJ_SESSION_NAME", "ZELLIJ_PANE_ID")}
        for _ in range(3):
            done = subprocess.run(["zellij", *args], env=env, capture_output=True, text=True, timeout=30,
                                  check=check, stdin=subprocess.DEVNULL, cwd=self.root)
            # A busy real server can miss the liveness check a `--session` call makes first: zellij then says no
            # session runs and sends nothing (the backend asks again the same way). Only that answer is retried.
            if not (args[:1] == ("--session",) and done.returncode == 1 and not done.stdout
                    and done.stderr.strip() == "There is no active session!"):
                break
            time.sleep(0.2)
        return done

    def start(self, session: str, *flags: str) -> None:
        made = self.run("attach", "--create-background", *flags, session)
        assert made.returncode == 0, made.stderr
        self.wait(lambda: session in self.live(), f"session {session} did not come up")
        # zellij lists a session before its layout has made the first pane; and a busy new server can miss the
        # connection check of zellij's own client, which then says for a moment that no session runs
        self.wait(lambda: self.run("--session", session, "action", "list-panes", "--json").stdout.count(
            '"is_plugin": false'), f"session {session} has no pane")

    def live(self) -> list[str]:
        out = self.run("list-sessions", "-n").stdout
        return [line.split(" [Created ")[0] for line in out.splitlines()
                if " [Created " in line and "(EXITED" not in line]

    def panes(self, session: str) -> list[dict[str, Any]]:
        for _ in range(3):  # zellij lets a busy server's client go after 1 s, silent, exit 0: asked again
            out = self.run("--session", session, "action", "list-panes", "--json")
            if out.returncode != 0 or out.stdout.strip():
                break
        assert out.returncode == 0, out.stderr
        panes: list[dict[str, Any]] = json.loads(out.stdout)
        return panes

    def terminals(self, session: str) -> list[dict[str, Any]]:
        return [p for p in self.panes(session) if not p["is_plugin"]]

    def wait(self, check: Any, what: str, limit: float = 30) -> None:
        deadline = time.monotonic() + limit
        while not check():
            assert time.monotonic() < deadline, what
            time.sleep(0.1)

    def serialized(self, session: str, text: str) -> None:
        """Wait until zellij has written the session's layout holding `text` (the fake writes it at once)."""
        if self.kind == "fake":
            return
        path = (Path(self.env["XDG_CACHE_HOME"]) / "zellij" / "contract_version_1" / "session_info" / session
                / "session-layout.kdl")

        def holds() -> bool:
            try:
                return text in path.read_text()
            except OSError:
                return False

        self.wait(holds, f"zellij did not write the layout of {session}")

    def cleanup(self) -> None:
        """Every session killed, then any process still holding this kit's socket folder in its environment (a
        server, a pane's program) killed: no test leaves a zellij running."""
        self.run("kill-all-sessions", "--yes")
        end_processes_with("ZELLIJ_SOCKET_DIR", str(self.socket_dir))


@pytest.fixture(params=["fake", "real"])
def zj(request: pytest.FixtureRequest, ws: Workspace) -> Iterator[ZellijKit]:
    """zellij for the backend's scenario tests, twice: the fake, then the real pinned release."""
    base = Path(tempfile.mkdtemp(prefix="mz", dir="/tmp"))  # short: socket paths are limited
    ws.env.update({"ZELLIJ_SOCKET_DIR": str(base / "s"), "MAM_BACKEND": "zellij", "SHELL": "/bin/sh"})
    if request.param == "real":
        binary = real_zellij()
        if binary is None:
            shutil.rmtree(base, ignore_errors=True)
            pytest.skip(f"zellij {ZELLIJ_VERSION} is not installed (.ci/run installs it: cargo install --locked "
                        f"zellij --version {ZELLIJ_VERSION})")
        # zellij looks in ~/.config/zellij first (and makes that folder): a config anywhere else would be
        # passed over, and zellij would write its own there and open its setup wizard.
        config = Path(ws.env["HOME"]) / ".config" / "zellij"
        (config / "layouts").mkdir(parents=True, exist_ok=True)
        (config / "config.kdl").write_text(ZELLIJ_CONFIG)
        (config / "layouts" / "single.kdl").write_text(ZELLIJ_LAYOUT)
        for sub in ("cache", "data", "run", "tmp"):
            (base / sub).mkdir(mode=0o700)
        path = [str(Path(binary).parent), *[p for p in ws.env["PATH"].split(os.pathsep) if Path(p) != FAKES],
                str(FAKES)]
        ws.env.update({"PATH": os.pathsep.join(path), "XDG_CACHE_HOME": str(base / "cache"),
                       "XDG_DATA_HOME": str(base / "data"), "XDG_RUNTIME_DIR": str(base / "run"),
                       "TMPDIR": str(base / "tmp"),  # zellij's log folder: $TMPDIR/zellij-UID/zellij-log
                       "TERM": "xterm-256color"})
    kit = ZellijKit(request.param, ws.env, ws.root)
    try:
        yield kit
    finally:
        kit.cleanup()
        shutil.rmtree(base, ignore_errors=True)


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


from herdr_kit import CONFIG as HERDR_CONFIG  # noqa: E402 - the `hd` fixture's herdr (tests/herdr_kit.py)
from herdr_kit import STANDIN_BIN as HERDR_STANDINS  # noqa: E402
from herdr_kit import HerdrKit, real_herdr  # noqa: E402
from sshd import sshd_fixture  # noqa: E402,F401 - the real-sshd fixture `sshd` (tests/sshd.py)


@pytest.fixture(params=["fake", "real"])
def hd(request: pytest.FixtureRequest, ws: Workspace) -> Iterator[HerdrKit]:
    """herdr for the backend's scenario tests, twice: the fake, then the real herdr on PATH when mam supports
    its version (skipped otherwise: docs/backends.md says how to build one by hand). The stand-in agents herdr
    detects (tests/agents/herdr) come first on PATH, for the servers' panes."""
    ws.env.update({"MAM_BACKEND": "herdr", "SHELL": "/bin/sh",
                   "PATH": os.pathsep.join([str(HERDR_STANDINS), ws.env["PATH"]])})
    if request.param == "real":
        binary, why = real_herdr(os.environ.get("PATH", ""))
        if binary is None:
            pytest.skip(f"the real herdr: {why} (docs/backends.md, 'herdr', says how to build 0.8.2 by hand and "
                        "put it first on PATH)")
        path = [str(HERDR_STANDINS), str(Path(binary).parent),
                *[p for p in ws.env["PATH"].split(os.pathsep) if Path(p) not in (FAKES, HERDR_STANDINS)]]
        state = Path(ws.env["XDG_CONFIG_HOME"]) / "state"
        ws.env.update({"PATH": os.pathsep.join(path), "XDG_STATE_HOME": str(state), "TERM": "xterm-256color"})
    kit = HerdrKit(request.param, ws.env, Path(ws.env["XDG_CONFIG_HOME"]))
    kit.root.mkdir(parents=True, exist_ok=True)
    (kit.root / "config.toml").write_text(HERDR_CONFIG)
    try:
        yield kit
    finally:
        kit.cleanup()


# The session-end check: no test leaves a process. What a worker's tests left (processes carrying its RUN_MARK,
# after every fixture's teardown) is killed and named; the run fails. Under pytest-xdist each worker checks its
# own and hands its list to the main process (workeroutput), which names them and fails the run.
_LEFT_KEY = "mam_left_processes"
# A process left behind fails the run (full runs stayed clean with it); MAM_TEST_LEFTOVERS=warn only names and
# kills them, for hunting a leak without losing the rest of a run.
STRICT_LEFTOVERS = os.environ.get("MAM_TEST_LEFTOVERS") != "warn"
_left: list[str] = []


def _end_ssh_masters() -> None:
    """The worker's shared ssh connections (ControlPersist masters, which outlive a test by design) end first."""
    sockets = RUNTIME_DIR / "mam-ssh"
    for sock in sorted(sockets.iterdir()) if sockets.is_dir() else []:
        if sock.is_socket():
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "mam-test"], capture_output=True,
                           timeout=10, stdin=subprocess.DEVNULL, check=False)


def left_processes(grace: float = 5) -> list[str]:
    """This process's tests' processes still alive after `grace` seconds (one dying as a test ends may still be
    there for a moment), as `pid command line`; each is then killed."""
    _end_ssh_masters()
    deadline = time.monotonic() + grace
    while (left := live_processes_with(*RUN_MARK)) and time.monotonic() < deadline:
        time.sleep(0.2)
    end_processes_with(*RUN_MARK)
    return [f"{pid} {cmdline}" for pid, cmdline in sorted(left.items())]


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the main process reports
        workeroutput[_LEFT_KEY] = left_processes()
        return
    _left.extend(left_processes())
    if _left and STRICT_LEFTOVERS and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: pytest without xdist has none
def pytest_testnodedown(node: Any, error: object) -> None:
    """An xdist worker's list of what its tests left behind (pytest_sessionfinish)."""
    _left.extend(getattr(node, "workeroutput", {}).get(_LEFT_KEY, []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _left:
        terminalreporter.section("processes left behind by the tests (killed now)", red=True)
        for line in _left:
            terminalreporter.line(" ".join(line.split())[:300])
        terminalreporter.line("No test may leave a process (tests/conftest.py, RUN_MARK): "
                              + ("the run fails." if STRICT_LEFTOVERS else "MAM_TEST_LEFTOVERS=warn: only named."))
