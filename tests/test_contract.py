"""The conformance kit run against mam's own backends: herdr and zellij over their fakes, tmux live."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from conftest import FAKES, FakeHerdr, base_env, end_processes_with
from mam.plugin.records import Backend, Failure, SpawnRequest
from mam.testing import BackendContract, FakeRunner
from mam_herdr.backend import HerdrBackend
from mam_tmux.backend import TmuxBackend
from mam_zellij.backend import ZellijBackend


class TestHerdrContract(BackendContract):
    down_samples: ClassVar[list[tuple[str, int]]] = [
        ('{"error":{"code":"server_not_running"}}', 1),
        ('{"id":"cli:agent:list","error":{"code":"server_not_running","message":"no herdr server is running"}}',
         1),
    ]
    sample_argv = ("herdr", "--session", "s", "agent", "list")

    @pytest.fixture
    def backend(self) -> Backend:
        return HerdrBackend()

    @pytest.fixture
    def env(self, tmp_path: Path) -> Iterator[dict[str, str]]:
        config = Path(tempfile.mkdtemp(prefix="mc", dir="/tmp"))
        env = base_env(tmp_path, XDG_CONFIG_HOME=str(config))
        self.fake = FakeHerdr(config, env)
        self.fake.quick_starts()
        yield env
        self.fake.cleanup()
        shutil.rmtree(config, ignore_errors=True)

    @pytest.fixture
    def populated_server(self, env: dict[str, str]) -> tuple[str, list[str]]:
        self.fake.start("pop")
        self.fake.set_agents("pop", [{"agent": "claude", "agent_status": "idle", "name": "one", "pane_id": "w1:p1",
                                      "terminal_id": "t1"}, {"agent": "codex", "agent_status": "idle",
                                                             "pane_id": "w1:p2", "terminal_id": "t2"}])
        return "pop", ["one"]

    @pytest.fixture
    def empty_server(self, env: dict[str, str]) -> str:
        self.fake.start("empty")
        return "empty"

    @pytest.fixture
    def bootstrap_server(self, env: dict[str, str]) -> Iterator[str]:
        yield "boot"

    @pytest.fixture
    def spawn_request(self, tmp_path: Path) -> SpawnRequest:
        """herdr starts only the agent kinds it knows, each with its own program."""
        return SpawnRequest(name="kit-agent", agent="claude", cwd=str(tmp_path), argv=("claude",))


class TestZellijContract(BackendContract):
    down_samples: ClassVar[list[tuple[str, int]]] = [("No active zellij sessions found.\n", 1)]
    sample_argv = ("zellij", "list-sessions", "-n")

    @pytest.fixture
    def backend(self) -> Backend:
        return ZellijBackend()

    @pytest.fixture
    def env(self, tmp_path: Path) -> Iterator[dict[str, str]]:
        env = base_env(tmp_path, ZELLIJ_SOCKET_DIR=str(tmp_path / "z"))
        yield env
        # The fake's sessions end as zellij's do, with every pane's program (the spawn/send/capture tests' `cat`)
        subprocess.run([str(FAKES / "zellij"), "kill-all-sessions", "--yes"], env=env, capture_output=True,
                       timeout=30, stdin=subprocess.DEVNULL, check=False)
        end_processes_with("ZELLIJ_SOCKET_DIR", env["ZELLIJ_SOCKET_DIR"])

    @pytest.fixture
    def empty_server(self, env: dict[str, str]) -> str:
        subprocess.run([str(FAKES / "zellij"), "attach", "--create-background", "quiet"], env=env, check=True,
                       timeout=30)
        return "quiet"

    @pytest.fixture
    def populated_server(self, env: dict[str, str]) -> tuple[str, list[str]]:
        state = Path(env["ZELLIJ_SOCKET_DIR"])
        state.mkdir(parents=True, exist_ok=True)
        panes = [{"id": 1, "plugin": False, "name": None, "title": "coder", "command": ["claude"], "cwd": "/repo",
                  "held": None}]  # the fake's own form of a pane (tests/fakes/zellij)
        (state / "fake-state.json").write_text(json.dumps({"sessions": {"pop": {"created": 0, "exited": False,
                                                                                "panes": panes}}}))
        return "pop", ["coder"]

    @pytest.fixture
    def bootstrap_server(self, env: dict[str, str]) -> Iterator[str]:
        yield "boot"

    @pytest.fixture
    def foreign_agent(self, env: dict[str, str], empty_server: str) -> tuple[str, str]:
        """A pane the user ran without a name: zellij titles it after its command."""
        subprocess.run([str(FAKES / "zellij"), "--session", empty_server, "run", "--", "cat"], env=env, check=True,
                       timeout=30, capture_output=True)
        return empty_server, "cat"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
class TestTmuxContract(BackendContract):
    """Live mode: against real tmux servers on private sockets."""

    down_samples: ClassVar[list[tuple[str, int]]] = [
        ("no server running on /tmp/tmux-0/x", 1),
        ("error connecting to /tmp/tmux-0/x (No such file or directory)", 1),
        ("server exited unexpectedly", 1),
        ("lost server", 1),
    ]
    sample_argv = ("tmux", "-N", "-L", "s", "list-panes")

    @pytest.fixture
    def backend(self) -> Backend:
        return TmuxBackend()

    @pytest.fixture
    def env(self, tmp_path: Path) -> Iterator[dict[str, str]]:
        tmpdir = Path(tempfile.mkdtemp(prefix="mk", dir="/tmp"))
        env = base_env(tmp_path, TMUX_TMPDIR=str(tmpdir), MAM_TMUX_CONFIG="/dev/null")
        self.servers: list[str] = []
        yield env
        for server in self.servers:
            subprocess.run(["tmux", "-L", server, "kill-server"], env=env, capture_output=True, timeout=30)
        shutil.rmtree(tmpdir, ignore_errors=True)

    def _server(self) -> str:
        name = f"mam-kit-{uuid.uuid4().hex[:6]}"
        self.servers.append(name)
        return name

    @pytest.fixture
    def populated_server(self, env: dict[str, str]) -> tuple[str, list[str]]:
        server = self._server()
        for name in ("alpha", "beta"):
            subprocess.run(["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-s", name, "sleep 600"],
                           env=env, check=True, timeout=30)
        return server, ["alpha", "beta"]

    @pytest.fixture
    def empty_server(self, env: dict[str, str]) -> str:
        """A server holding only mam's keep-alive session, as `mam bootstrap` leaves it."""
        server = self._server()
        subprocess.run(["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-s", "_mam_keepalive"],
                       env=env, check=True, timeout=30)
        return server

    @pytest.fixture
    def bootstrap_server(self, env: dict[str, str]) -> Iterator[str]:
        yield self._server()

    @pytest.fixture
    def foreign_agent(self, env: dict[str, str]) -> tuple[str, str]:
        """The user's own session, made by hand: no @mam_pane."""
        server = self._server()
        subprocess.run(["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-s", "work", "sleep 600"],
                       env=env, check=True, timeout=30)
        return server, "work"


def test_fake_runner_lets_a_backend_run_without_its_binary(fake_runner: FakeRunner) -> None:
    from mam.plugin.records import CallContext

    fake_runner.answer(["tmux", "-N", "-L", "s1", "-u", "list-panes"], 0,
                       "$1\x1fagent\x1f0\x1f0\x1f%3\x1f42\x1f0\x1fclaude\x1f/repo\x1f%3\n")
    agents = TmuxBackend().list_agents("s1", CallContext(timeout=1, env={}))
    assert not isinstance(agents, Failure)
    assert [(a.name, a.agent, a.cwd, a.pane_id) for a in agents] == [("agent", "claude", "/repo", "%3")]
    assert fake_runner.calls[0][:4] == ("tmux", "-N", "-L", "s1")
    missing = TmuxBackend().list_agents("s2", CallContext(timeout=1, env={}))
    assert isinstance(missing, Failure) and missing.result.not_found


class TestThirdPartyEchoContract(BackendContract):
    """The kit against a third-party backend that pip installed and that mam finds by its entry point."""

    down_samples: ClassVar[list[tuple[str, int]]] = [("echo: no such server", 1)]
    sample_argv = ("echo",)

    @pytest.fixture(autouse=True)
    def _installed(self, echo_site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.syspath_prepend(str(echo_site))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(echo_site), os.environ.get("PYTHONPATH")])))

    @pytest.fixture
    def backend(self, _installed: None) -> Backend:
        from mam.plugin.manager import Plugins

        return Plugins(os.environ).backend("echo")

    @pytest.fixture
    def env(self, _installed: None) -> dict[str, str]:
        return {**base_env(Path(tempfile.gettempdir())), "PYTHONPATH": os.environ["PYTHONPATH"],
                "ECHO_AGENTS": json.dumps({"pop": ["a", "b"], "empty": []})}

    @pytest.fixture
    def populated_server(self) -> tuple[str, list[str]]:
        return "pop", ["a", "b"]

    @pytest.fixture
    def empty_server(self) -> str:
        return "empty"

    @pytest.fixture
    def bootstrap_server(self) -> Iterator[str | None]:
        pytest.skip("the echo backend's servers are always up: it has no down server to start")
        yield None
