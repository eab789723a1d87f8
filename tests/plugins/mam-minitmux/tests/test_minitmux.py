"""minitmux through mam's backend kit: real tmux servers, each on a private socket in a folder of the test's."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from typing import ClassVar

import pytest

from mam.api import Backend
from mam.testing import BackendContract
from mam_minitmux.backend import KEEPALIVE, MiniTmuxBackend


class TestMiniTmux(BackendContract):
    down_samples: ClassVar[list[tuple[str, int]]] = [
        ("no server running on /tmp/tmux-0/x", 1),
        ("error connecting to /tmp/tmux-0/x (No such file or directory)", 1),
    ]
    sample_argv = ("tmux", "-N", "-L", "s", "list-panes")

    @pytest.fixture
    def backend(self) -> Backend:
        return MiniTmuxBackend()

    @pytest.fixture
    def env(self) -> Iterator[dict[str, str]]:
        """TMUX_TMPDIR holds every socket of the test (a short path: sockets allow about 100 bytes)."""
        folder = tempfile.mkdtemp(prefix="mt", dir="/tmp")
        env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        env["TMUX_TMPDIR"] = folder
        self.servers: list[str] = []
        yield env
        for server in self.servers:
            subprocess.run(["tmux", "-L", server, "kill-server"], env=env, capture_output=True, timeout=30)
        shutil.rmtree(folder, ignore_errors=True)

    def server(self, env: dict[str, str], *sessions: str) -> str:
        name = f"kit-{uuid.uuid4().hex[:8]}"
        self.servers.append(name)
        for session in sessions:
            subprocess.run(["tmux", "-L", name, "-f", "/dev/null", "new-session", "-d", "-s", session, "sleep 600"],
                           env=env, check=True, timeout=30)
        return name

    @pytest.fixture
    def populated_server(self, env: dict[str, str]) -> tuple[str, list[str]]:
        return self.server(env, KEEPALIVE, "alpha", "beta"), ["alpha", "beta"]

    @pytest.fixture
    def empty_server(self, env: dict[str, str]) -> str:
        return self.server(env, KEEPALIVE)

    @pytest.fixture
    def bootstrap_server(self, env: dict[str, str]) -> Iterator[str]:
        yield self.server(env)

    @pytest.fixture
    def foreign_agent(self, env: dict[str, str]) -> tuple[str, str]:
        """The user's own session, made by hand: not mam's."""
        return self.server(env, KEEPALIVE, "work"), "work"
