"""`BackendContract`: the checks every mam backend must pass, as a pytest base class.

Subclass it in a test module and override the `backend` fixture; override `populated_server`,
`empty_server` and `bootstrap_server` to give it servers to work with (each may return None to skip the
checks that need it), and `down_samples` with failures your backend must call down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from mam import envscrub
from mam.plugin.builtin import fallback_classification
from mam.plugin.records import (
    AGENT_STATES,
    Agent,
    AgentState,
    Backend,
    BackendSpec,
    BootstrapContext,
    CallContext,
    CommandResult,
    ErrorKind,
    Failure,
    PaneCapture,
    ScrubRule,
    ServerError,
)

_JUNK_OUTPUTS = ("", "\x00\x01\x02", "{", "[]", "null", '{"error": 3}', '{"error":{"code":null}}', "é" * 5000,
                 "server_not_running", "warning: no server running", "Traceback (most recent call last):\n  x",
                 '{"error":{"code":"server_not_running"}}\n{"error":{"code":"server_not_running"}}')


def _sample_name(pattern: str) -> str:
    return pattern[:-1] + "SAMPLE" if pattern.endswith("*") else pattern


class BackendContract:
    """Inherit, override `backend`, run pytest. Every check is a plain test method."""

    #: failures (stderr, exit code) that your backend's own signal says mean "down"
    down_samples: ClassVar[list[tuple[str, int]]] = []
    #: the argv your backend's listing call starts with, for the down samples (e.g. ("tmux",))
    sample_argv: ClassVar[tuple[str, ...]] = ("backend",)

    @pytest.fixture
    def backend(self) -> Backend:
        raise NotImplementedError("override the `backend` fixture to return your backend object")

    @pytest.fixture
    def spec(self, backend: Backend) -> BackendSpec:
        from mam.plugin.manager import Plugins

        return Plugins(os.environ).spec(backend.name)

    @pytest.fixture
    def env(self) -> dict[str, str]:
        """The environment backend processes get in these tests."""
        return dict(os.environ)

    @pytest.fixture
    def ctx(self, env: dict[str, str]) -> CallContext:
        return CallContext(timeout=10.0, env=env)

    @pytest.fixture
    def populated_server(self) -> tuple[str, list[str]] | None:
        """A running server and the names of the agents it hosts, or None."""
        return None

    @pytest.fixture
    def empty_server(self) -> str | None:
        """A server that runs and hosts no agent, or None."""
        return None

    @pytest.fixture
    def bootstrap_server(self) -> Iterator[str | None]:
        """A server name that is down and may be started (and is cleaned up after), or None."""
        yield None

    # The spec
    def test_spec_declares_the_backend(self, backend: Backend, spec: BackendSpec) -> None:
        assert spec.name == backend.name
        assert spec.description
        assert all(isinstance(m, str) and m for m in spec.markers)
        assert isinstance(spec.load(), type(backend))

    def test_scrub_removes_the_markers_and_nothing_else(self, spec: BackendSpec) -> None:
        rules = [ScrubRule(m, spec.name) for m in spec.markers]
        config = {"HOME": "/home/u", "PATH": "/usr/bin", "CLAUDE_CONFIG_DIR": "/c", "MAM_X": "1", "LANG": "C"}
        markers = {_sample_name(m): "x" for m in spec.markers}
        plan = envscrub.plan({**config, **markers}, rules, envscrub.keep_rules((), "test"))
        assert plan.env == config
        assert {d.name for d in plan.removed} == set(markers)

    # Listing
    def test_listing_has_the_contract_shape(self, backend: Backend, ctx: CallContext,
                                            populated_server: tuple[str, list[str]] | None) -> None:
        if populated_server is None:
            pytest.skip("override the populated_server fixture to check listings of a server with agents")
        server, names = populated_server
        agents = backend.list_agents(server, ctx)
        assert not isinstance(agents, Failure), agents
        assert all(isinstance(a, Agent) for a in agents)
        for a in agents:
            for value in (a.name, a.agent, a.state, a.cwd, a.pane_id):
                assert value is None or isinstance(value, str)
        assert sorted(a.name for a in agents if a.name) == sorted(names)

    def test_empty_server_lists_no_agent(self, backend: Backend, ctx: CallContext, empty_server: str | None) -> None:
        if empty_server is None:
            pytest.skip("override the empty_server fixture to check that a server without agents lists none")
        assert backend.list_agents(empty_server, ctx) == ()

    # Agent state (hook API 2)
    def test_agent_state_hooks_answer_in_shape(self, backend: Backend, ctx: CallContext,
                                               populated_server: tuple[str, list[str]] | None) -> None:
        """Through the core's default hooks: each live agent gets a native AgentState or nothing, and the rest a
        PaneCapture keyed by its name (or is left out), from a backend that has `capture_panes`."""
        if populated_server is None:
            pytest.skip("override the populated_server fixture to check agent state")
        from mam.plugin.manager import Plugins

        plugins = Plugins(ctx.env)
        server, _ = populated_server
        agents = backend.list_agents(server, ctx)
        assert not isinstance(agents, Failure), agents
        named = tuple(a for a in agents if a.name)
        rest = []
        for agent in named:
            native = plugins.agent_state(backend, server, agent, ctx)
            assert native is None or (isinstance(native, AgentState) and native.state in AGENT_STATES
                                      and native.source == "backend"), native
            if native is None:
                rest.append(agent)
        captured = plugins.capture_panes(backend, server, tuple(rest), ctx)
        if captured is None:
            assert not hasattr(backend, "capture_panes")
            return
        assert not isinstance(captured, Failure), captured
        assert set(captured) <= {a.name for a in rest}
        for capture in captured.values():
            assert isinstance(capture, PaneCapture)
            assert capture.text is None or isinstance(capture.text, str)
            assert capture.idle_seconds is None or capture.idle_seconds >= 0

    def test_capture_and_send_never_start_a_server(self, backend: Backend, ctx: CallContext,
                                                   bootstrap_server: str | None) -> None:
        if bootstrap_server is None:
            pytest.skip("override the bootstrap_server fixture to check that capture and send start nothing")
        ghosts = (Agent(name="ghost", pane_id="1"), Agent(name="ghost2", pane_id="%1"),
                  Agent(name="ghost3", pane_id="w1:p1"))  # pane ids as the shipped backends spell them
        capture = getattr(backend, "capture_panes", None)
        if capture is not None:
            answer = capture(bootstrap_server, ghosts, ctx)
            assert isinstance(answer, Failure) or dict(answer) == {}, answer
        send = getattr(backend, "send_text", None)
        if send is not None:
            for ghost in ghosts:
                assert not send(bootstrap_server, ghost, "hello", True, ctx).ok
        listing = backend.list_agents(bootstrap_server, ctx)
        assert isinstance(listing, Failure), "capture or send started the server"
        error = backend.classify(listing)
        assert error is not None and error.kind is ErrorKind.SERVER_DOWN, error

    # Classification
    def test_classify_never_raises_and_never_guesses_down(self, backend: Backend) -> None:
        for text in _JUNK_OUTPUTS:
            for code in (None, 0, 1, 2, 127, -9):
                for out, err in ((text, ""), ("", text + "x"), (text, text + " garbage")):
                    failure = Failure(backend.name, "s", CommandResult(self.sample_argv, code, out, err))
                    result = backend.classify(failure)
                    assert result is None or isinstance(result, ServerError)
                    assert result is None or result.kind is not ErrorKind.SERVER_DOWN, (out, err, code)
        assert fallback_classification(Failure(backend.name, "s", CommandResult(self.sample_argv, 1))).kind \
            is ErrorKind.UNKNOWN

    def test_recognises_its_down_samples(self, backend: Backend) -> None:
        if not self.down_samples:
            pytest.skip("set down_samples to check that your backend's own down signals are read as down")
        for stderr, code in self.down_samples:
            failure = Failure(backend.name, "s", CommandResult(self.sample_argv, code, "", stderr))
            result = backend.classify(failure)
            assert result is not None and result.kind is ErrorKind.SERVER_DOWN, stderr

    # Bootstrap
    def test_bootstrap_is_idempotent(self, backend: Backend, ctx: CallContext, tmp_path: Path,
                                     bootstrap_server: str | None) -> None:
        if bootstrap_server is None:
            pytest.skip("override the bootstrap_server fixture to check that starting a server is idempotent")
        bctx = BootstrapContext(timeout=10, wait=10, env=ctx.env, log_path=tmp_path / "server.log", cwd=tmp_path)
        first = backend.bootstrap(bootstrap_server, bctx)
        assert first.up and first.started, first
        second = backend.bootstrap(bootstrap_server, bctx)
        assert second.up and not second.started, second
        assert backend.list_agents(bootstrap_server, ctx) == ()

    # The command line
    def test_cli_status_smoke(self, backend: Backend, env: dict[str, str], tmp_path: Path) -> None:
        proc = subprocess.run(  # noqa: S603 - explicit argv, no shell
            [sys.executable, "-m", "mam", "--backend", backend.name, "status", "--json"],
                              env={**env, "MAM_WORKSPACE": str(tmp_path)}, capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["schema"] == 1 and doc["backend"] == backend.name and doc["sessions"] == []
