"""`BackendContract`: the checks every mam backend must pass, as a pytest base class.

Subclass it in a test module and override the `backend` fixture; override `populated_server`,
`empty_server` and `bootstrap_server` to give it servers to work with (each may return None: the checks
that need it are then skipped, and said so in the kit's report), `spawn_request` with an agent your backend can
start, and set `down_samples` with failures your backend must call down. docs/backends.md ("The kit: testing a
whole backend") says what each fixture and setting is for.

Every optional operation the backend declares (`BackendSpec.operations`; without it, those its object has a
method for) is tested, and one it declares without the method fails; each one it leaves out is a line of the
report printed at the end of the run (mam/testing/report.py), never a silent skip.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from mam.plugin import envscrub
from mam.plugin.builtin import fallback_classification, takes_force
from mam.plugin.helpers import poll_until
from mam.plugin.records import (
    AGENT_STATES,
    LOOKED_FOR,
    OPERATIONS,
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
    Remains,
    ScrubRule,
    SendResult,
    ServerError,
    SpawnRequest,
    SpawnResult,
    StopResult,
    implemented_operations,
    missing_methods,
)
from mam.testing.report import BACKEND, REPORT_PLUGIN, KitReport, note

# Deferred imports (inside functions), for start-up: the plugin manager loads only for the tests that ask the hooks.

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
    #: how long, in seconds, an agent may take to show in (or leave) the listing after a spawn (or a stop), and
    #: a sent text to show on its captured screen
    settle_wait: ClassVar[float] = 15.0
    #: the text the send check types
    sample_text: ClassVar[str] = "mam kit says hello"
    #: how the `ending_request` agent ends, for the remains check: the exit status it exits with, and lines it
    #: prints last, which its remains must keep in this order
    ending_status: ClassVar[int] = 3
    ending_lines: ClassVar[tuple[str, ...]] = ("kit ending one", "kit ending two")

    # The fixtures to override
    @pytest.fixture
    def backend(self) -> Backend:
        raise NotImplementedError("override the `backend` fixture to return your backend object")

    @pytest.fixture
    def spec(self, backend: Backend) -> BackendSpec:
        from mam.plugin.manager import Plugins

        return Plugins(os.environ).spec(backend.name)

    @pytest.fixture
    def operations(self, spec: BackendSpec, backend: Backend) -> frozenset[str]:
        """The optional operations the backend declares: its spec's, or those its object has a method for."""
        return frozenset(spec.operations) if spec.operations is not None else implemented_operations(backend)

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
        """A server that runs and hosts no agent, or None. The spawn check starts an agent in it."""
        return None

    @pytest.fixture
    def bootstrap_server(self) -> Iterator[str | None]:
        """A server name that is down and may be started (and is cleaned up after), or None."""
        yield None

    @pytest.fixture
    def spawn_request(self, tmp_path: Path) -> SpawnRequest:
        """The agent the spawn check starts in `empty_server`: `cat` (it waits for input and shows what it is
        sent), in a pane named kit-agent. Override it when your backend starts only agents it knows."""
        return SpawnRequest(name="kit-agent", agent=None, cwd=str(tmp_path), argv=("cat",))

    @pytest.fixture
    def ending_request(self, tmp_path: Path) -> SpawnRequest | None:
        """The agent the remains check starts in `empty_server`: it prints `ending_lines`, stays three
        seconds (past any check of a program that ends at once, even a slow one over ssh) and exits with
        `ending_status`, in a pane named kit-ending.
        Override it when your backend starts only agents it knows; None leaves the check out."""
        script = "".join(f"printf '%s\\n' {shlex.quote(line)}; " for line in self.ending_lines)
        return SpawnRequest(name="kit-ending", agent=None, cwd=str(tmp_path),
                            argv=("sh", "-c", f"{script}sleep 3; exit {self.ending_status}"))

    @pytest.fixture
    def foreign_agent(self) -> tuple[str, str] | None:
        """A running server and the name of a pane or session on it that mam did not make (tmux: a session made
        by hand, without `@mam_pane`), which a stop must leave running unless forced; or None."""
        return None

    @pytest.fixture
    def live_agent(self, request: pytest.FixtureRequest, backend: Backend, operations: frozenset[str],
                   ctx: CallContext, spawn_request: SpawnRequest) -> tuple[str, Agent] | None:
        """A running agent for stop, send, capture and state, with its server: one the backend spawned in
        `empty_server` when it declares spawn, else the first named agent of `populated_server`; or None."""
        if "spawn" in operations and callable(getattr(backend, "spawn", None)):
            server = request.getfixturevalue("empty_server")
            if server is not None:
                result = backend.spawn(server, spawn_request, ctx)  # type: ignore[attr-defined]
                assert isinstance(result, SpawnResult) and result.ok, result
                agent = self._wait_listed(backend, server, spawn_request.name, ctx)
                assert agent is not None, f"{spawn_request.name} was started but never listed"
                return server, agent
        populated = request.getfixturevalue("populated_server")
        if populated is None:
            return None
        server, _ = populated
        agents = backend.list_agents(server, ctx)
        assert not isinstance(agents, Failure), agents
        named = [a for a in agents if a.name]
        return (server, named[0]) if named else None

    @pytest.fixture(autouse=True)
    def _kit_report(self, request: pytest.FixtureRequest, backend: Backend) -> None:
        """The report, also when mam.testing.pytest_plugin is not loaded (then without pytest-xdist only), and
        the backend each test is of, for a skip that a fixture of the subclass makes."""
        manager = request.config.pluginmanager
        if not manager.has_plugin(REPORT_PLUGIN):
            manager.register(KitReport(), REPORT_PLUGIN)
        request.node.user_properties.append((BACKEND, backend.name))

    # Helpers
    @staticmethod
    def _untested(request: pytest.FixtureRequest, backend: Backend, subject: str, why: str) -> None:
        note(request.node, backend.name, subject, why)
        pytest.skip(f"{backend.name}: {subject}: {why}")

    def _operation(self, request: pytest.FixtureRequest, backend: Backend, operations: frozenset[str],
                   operation: str) -> Callable[..., Any]:
        """The method of a declared operation; a skip (and a line of the report) when it is not declared, and a
        failure when it is declared and the backend object has no such method."""
        method, without = OPERATIONS[operation]
        if operation not in operations:
            self._untested(request, backend, operation, f"not declared ({without})")
        found = getattr(backend, method, None)
        if not callable(found):
            pytest.fail(f"{backend.name} declares {operation} but its backend object has no {method}()",
                        pytrace=False)
        return found  # type: ignore[no-any-return]

    def _given(self, request: pytest.FixtureRequest, backend: Backend, subject: str, value: Any,
               fixture: str) -> Any:
        if value is None:
            self._untested(request, backend, subject, f"not checked: the {fixture} fixture gives none")
        return value

    @staticmethod
    def _listed(backend: Backend, server: str, name: str, ctx: CallContext) -> Agent | None:
        agents = backend.list_agents(server, ctx)
        assert not isinstance(agents, Failure), agents
        return next((a for a in agents if a.name == name), None)

    def _wait_listed(self, backend: Backend, server: str, name: str, ctx: CallContext) -> Agent | None:
        return poll_until(lambda: self._listed(backend, server, name, ctx), wait=self.settle_wait, interval=0.1)

    def _wait_gone(self, backend: Backend, server: str, name: str, ctx: CallContext) -> bool:
        gone = poll_until(lambda: True if self._listed(backend, server, name, ctx) is None else None,
                          wait=self.settle_wait, interval=0.1)
        return gone is True

    def test_peek_and_attach_find_their_methods(self, request: pytest.FixtureRequest, backend: Backend) -> None:
        """read_pane and attach_argv are never declared: mam looks for them on the object. The kit does not run
        them; each one the object lacks is a line of the report, as `mam backends` lists it under LEFT OUT."""
        missing = missing_methods(backend)
        for name in missing:
            note(request.node, backend.name, name, f"not implemented ({LOOKED_FOR[name][1]})")
        if missing:
            pytest.skip(f"{backend.name}: {', '.join(missing)}: not implemented")

    # The spec
    def test_spec_declares_the_backend(self, backend: Backend, spec: BackendSpec) -> None:
        assert spec.name == backend.name
        assert spec.description
        assert all(isinstance(m, str) and m for m in spec.markers)
        assert isinstance(spec.load(), type(backend))
        assert spec.operations is None or set(spec.operations) <= set(OPERATIONS), spec.operations

    def test_scrub_removes_the_markers_and_nothing_else(self, request: pytest.FixtureRequest, backend: Backend,
                                                        spec: BackendSpec) -> None:
        if not spec.markers:
            self._untested(request, backend, "scrub", "not checked: the BackendSpec declares no markers (nothing "
                           "its panes set is kept from the servers and agents mam starts)")
        rules = [ScrubRule(m, spec.name) for m in spec.markers]
        config = {"HOME": "/home/u", "PATH": "/usr/bin", "CLAUDE_CONFIG_DIR": "/c", "MAM_X": "1", "LANG": "C"}
        markers = {_sample_name(m): "x" for m in spec.markers}
        plan = envscrub.plan({**config, **markers}, rules, envscrub.keep_rules((), "test"))
        assert plan.env == config
        assert {d.name for d in plan.removed} == set(markers)
        from mam.plugin.manager import Plugins  # and the core turns them into rules of their own

        patterns = {r.pattern for r in Plugins(os.environ).scrub_rules() if r.source == f"backend {spec.name}"}
        assert set(spec.markers) <= patterns

    # Listing
    def test_listing_has_the_contract_shape(self, request: pytest.FixtureRequest, backend: Backend,
                                            ctx: CallContext, populated_server: tuple[str, list[str]] | None) -> None:
        server, names = self._given(request, backend, "list", populated_server, "populated_server")
        agents = backend.list_agents(server, ctx)
        assert not isinstance(agents, Failure), agents
        assert all(isinstance(a, Agent) for a in agents)
        for a in agents:
            for value in (a.name, a.agent, a.state, a.cwd, a.pane_id):
                assert value is None or isinstance(value, str)
        assert sorted(a.name for a in agents if a.name) == sorted(names)

    def test_empty_server_lists_no_agent(self, request: pytest.FixtureRequest, backend: Backend, ctx: CallContext,
                                         empty_server: str | None) -> None:
        server = self._given(request, backend, "list of an empty server", empty_server, "empty_server")
        assert backend.list_agents(server, ctx) == ()

    # Agent state (hook API 2)
    def test_agent_state_hooks_answer_in_shape(self, request: pytest.FixtureRequest, backend: Backend,
                                               ctx: CallContext,
                                               populated_server: tuple[str, list[str]] | None) -> None:
        """Through the core's default hooks: each live agent gets a native AgentState or nothing, and the rest a
        PaneCapture keyed by its name (or is left out), from a backend that has `capture_panes`."""
        server, _ = self._given(request, backend, "state hooks", populated_server, "populated_server")
        from mam.plugin.manager import Plugins

        plugins = Plugins(ctx.env)
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

    def test_capture_and_send_never_start_a_server(self, request: pytest.FixtureRequest, backend: Backend,
                                                   ctx: CallContext, bootstrap_server: str | None) -> None:
        server = self._given(request, backend, "capture and send to a down server", bootstrap_server,
                             "bootstrap_server")
        ghosts = (Agent(name="ghost", pane_id="1"), Agent(name="ghost2", pane_id="%1"),
                  Agent(name="ghost3", pane_id="w1:p1"))  # pane ids as the shipped backends spell them
        capture = getattr(backend, "capture_panes", None)
        if capture is not None:
            answer = capture(server, ghosts, ctx)
            assert isinstance(answer, Failure) or dict(answer) == {}, answer
        send = getattr(backend, "send_text", None)
        if send is not None:
            for ghost in ghosts:
                assert not send(server, ghost, "hello", True, ctx).ok
        listing = backend.list_agents(server, ctx)
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

    def test_recognises_its_down_samples(self, request: pytest.FixtureRequest, backend: Backend) -> None:
        if not self.down_samples:
            self._untested(request, backend, "classify of a down server",
                           "not checked: set down_samples to the failures your multiplexer gives when down")
        for stderr, code in self.down_samples:
            failure = Failure(backend.name, "s", CommandResult(self.sample_argv, code, "", stderr))
            result = backend.classify(failure)
            assert result is not None and result.kind is ErrorKind.SERVER_DOWN, stderr

    # Bootstrap
    def test_bootstrap_is_idempotent(self, request: pytest.FixtureRequest, backend: Backend, ctx: CallContext,
                                     tmp_path: Path, bootstrap_server: str | None) -> None:
        server = self._given(request, backend, "bootstrap", bootstrap_server, "bootstrap_server")
        bctx = BootstrapContext(timeout=10, wait=10, env=ctx.env, log_path=tmp_path / "server.log", cwd=tmp_path)
        first = backend.bootstrap(server, bctx)
        assert first.up and first.started, first
        second = backend.bootstrap(server, bctx)
        assert second.up and not second.started, second
        assert backend.list_agents(server, ctx) == ()

    # The optional operations: each declared one is tested, each left out is a line of the report
    def test_spawn_starts_an_agent_its_listing_shows(self, request: pytest.FixtureRequest, backend: Backend,
                                                     operations: frozenset[str], ctx: CallContext,
                                                     empty_server: str | None,
                                                     spawn_request: SpawnRequest) -> None:
        spawn = self._operation(request, backend, operations, "spawn")
        server = self._given(request, backend, "spawn", empty_server, "empty_server")
        result = spawn(server, spawn_request, ctx)
        assert isinstance(result, SpawnResult) and result.ok, result
        agent = self._wait_listed(backend, server, spawn_request.name, ctx)
        assert agent is not None, f"{spawn_request.name} was started but never listed"
        assert agent.cwd is None or os.path.realpath(agent.cwd) == os.path.realpath(spawn_request.cwd), agent

    def test_stop_closes_the_agent_once(self, request: pytest.FixtureRequest, backend: Backend,
                                        operations: frozenset[str], ctx: CallContext) -> None:
        stop = self._operation(request, backend, operations, "stop")
        server, agent = self._given(request, backend, "stop", request.getfixturevalue("live_agent"), "live_agent")
        first = stop(server, agent.name, ctx)
        assert isinstance(first, StopResult) and first.stopped and first.failure is None, first
        assert self._wait_gone(backend, server, agent.name, ctx), f"{agent.name} is still listed after its stop"
        again = stop(server, agent.name, ctx)  # already gone: said so, not an error
        assert isinstance(again, StopResult) and not again.stopped and again.failure is None, again

    def test_stop_leaves_what_mam_did_not_make(self, request: pytest.FixtureRequest, backend: Backend,
                                              operations: frozenset[str], ctx: CallContext) -> None:
        """A registry row may name anything: a stop closes only what carries mam's mark, and says so of the rest
        (`foreign`); with `force` (the user named it), it closes it."""
        stop = self._operation(request, backend, operations, "stop")
        server, name = self._given(request, backend, "stop of what mam did not make",
                                   request.getfixturevalue("foreign_agent"), "foreign_agent")
        for _ in range(2):  # left, and so still there to be left again
            left = stop(server, name, ctx)
            assert isinstance(left, StopResult) and left.foreign and not left.stopped and left.failure is None, left
        if not takes_force(stop):
            pytest.fail(f"{backend.name}'s stop takes no `force` keyword (hook API 4): `mam stop NAME --force` "
                        "cannot close what it leaves", pytrace=False)
        forced = stop(server, name, ctx, force=True)
        assert isinstance(forced, StopResult) and forced.stopped and not forced.foreign, forced
        after = stop(server, name, ctx)
        assert isinstance(after, StopResult) and not after.stopped and not after.foreign, after

    def test_send_types_into_a_live_agent_only(self, request: pytest.FixtureRequest, backend: Backend,
                                               operations: frozenset[str], ctx: CallContext) -> None:
        send = self._operation(request, backend, operations, "send")
        server, agent = self._given(request, backend, "send", request.getfixturevalue("live_agent"), "live_agent")
        result = send(server, agent, self.sample_text, True, ctx)
        assert isinstance(result, SendResult) and result.ok, result
        capture = getattr(backend, "capture_panes", None)
        if "capture" in operations and capture is not None:  # what was typed shows on the agent's screen

            def shown() -> bool | None:
                answer = capture(server, (agent,), ctx)
                screen = None if isinstance(answer, Failure) else answer.get(agent.name)
                return True if screen is not None and self.sample_text in (screen.text or "") else None

            assert poll_until(shown, wait=self.settle_wait, interval=0.2), "the sent text never showed on screen"
        ghost = Agent(name="kit-ghost", pane_id="999999")
        answer = send(server, ghost, self.sample_text, True, ctx)
        assert isinstance(answer, SendResult) and not answer.ok, answer

    def test_capture_reads_a_live_agents_screen(self, request: pytest.FixtureRequest, backend: Backend,
                                                operations: frozenset[str], ctx: CallContext) -> None:
        capture = self._operation(request, backend, operations, "capture")
        server, agent = self._given(request, backend, "capture", request.getfixturevalue("live_agent"),
                                    "live_agent")
        answer = capture(server, (agent,), ctx)
        assert not isinstance(answer, Failure), answer
        assert set(answer) == {agent.name}, answer
        screen = answer[agent.name]
        assert isinstance(screen, PaneCapture) and (screen.text is None or isinstance(screen.text, str)), screen
        assert not screen.dead, screen
        assert screen.idle_seconds is None or screen.idle_seconds >= 0, screen

    def test_agent_state_answers_in_shape(self, request: pytest.FixtureRequest, backend: Backend,
                                          operations: frozenset[str], ctx: CallContext) -> None:
        state = self._operation(request, backend, operations, "state")
        server, agent = self._given(request, backend, "state", request.getfixturevalue("live_agent"),
                                    "live_agent")
        answer = state(server, agent, ctx)
        assert answer is None or (isinstance(answer, AgentState) and answer.state in AGENT_STATES), answer

    def test_remains_keep_how_a_dead_agent_ended(self, request: pytest.FixtureRequest, backend: Backend,
                                                 operations: frozenset[str], ctx: CallContext) -> None:
        """The agent of `ending_request` ends by itself: its remains have its exit status and last lines, and a
        name that no agent of the server has gets none."""
        remains = self._operation(request, backend, operations, "remains")
        if "spawn" not in operations:
            self._untested(request, backend, "remains", "not checked: the check spawns the agent that ends, and "
                           "spawn is not declared")
        server = self._given(request, backend, "remains", request.getfixturevalue("empty_server"), "empty_server")
        ending = self._given(request, backend, "remains", request.getfixturevalue("ending_request"),
                             "ending_request")
        started = backend.spawn(server, ending, ctx)  # type: ignore[attr-defined]
        assert isinstance(started, SpawnResult), started  # ok or not: an agent may be told to have ended at once

        def ended() -> Remains | None:
            answer = remains(server, (ending.name, "kit-nobody"), ctx)
            assert not isinstance(answer, Failure), answer
            assert set(answer) <= {ending.name}, answer
            found = answer.get(ending.name)
            return found if found is not None and found.exit_status is not None else None

        found = poll_until(ended, wait=self.settle_wait, interval=0.2)
        assert isinstance(found, Remains), f"{ending.name} ended, but its remains never showed"
        assert found.exit_status == self.ending_status and found.exit_signal is None, found
        assert all(isinstance(line, str) for line in found.lines), found
        shown = [line.strip() for line in found.lines]
        assert [line for line in shown if line in self.ending_lines] == list(self.ending_lines), found

    def test_client_argv_names_the_server_and_keeps_the_arguments(self, request: pytest.FixtureRequest,
                                                                   backend: Backend, spec: BackendSpec,
                                                                   operations: frozenset[str]) -> None:
        client_argv = self._operation(request, backend, operations, "client_argv")
        args = ["list", "two words", "--flag=1"]
        argv = client_argv("kit-server", list(args))
        assert isinstance(argv, list) and all(isinstance(part, str) for part in argv), argv
        assert argv[len(argv) - len(args):] == args, argv
        assert any("kit-server" in part for part in argv[:len(argv) - len(args)]), argv
        if spec.executable:
            assert os.path.basename(argv[0]) == spec.executable, argv

    # The command line
    def test_cli_status_smoke(self, backend: Backend, env: dict[str, str], tmp_path: Path) -> None:
        proc = subprocess.run(  # noqa: S603 - explicit argv, no shell
            [sys.executable, "-m", "mam", "--backend", backend.name, "status", "--json"],
                              env={**env, "MAM_WORKSPACE": str(tmp_path)}, capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["schema"] == 1 and doc["backend"] == backend.name and doc["sessions"] == []

