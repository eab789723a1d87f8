"""Backend calls routed to another host through ssh: the real sshd on 127.0.0.1 and real tmux on private sockets.

The backend object is driven as the core drives it, inside a route (mam.calls.route.remote_route): it builds the
same argv as for this machine and never learns where it runs. The "remote" tmux servers live under a private
TMUX_TMPDIR set on the remote side by the route (as $MAM_SSH_ENV does), so none is a default server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import test_contract
from sshd import Sshd

from conftest import base_env
from mam.calls import runner
from mam.calls.remote import Routes, build_route, parse_ssh_env, unset_patterns
from mam.calls.route import Route, current_route, remote_route, with_route
from mam.calls.transport import SshTransport
from mam.plugin.builtin import process_classification
from mam.plugin.envscrub import DEFAULT_RULES, keep_rules
from mam.plugin.records import (
    BootstrapContext,
    CallContext,
    CommandResult,
    ErrorKind,
    Failure,
    ScrubRule,
    ServerError,
    SpawnRequest,
)
from mam.servers.app import App
from mam.util.errors import MamError
from mam_tmux.backend import TmuxBackend

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
MARKERS = {"TMUX": "/tmp/tmux-0/default,1,0", "TMUX_PANE": "%0", "HERDR_ENV": "1", "CLAUDECODE": "1"}


def _short_dir(prefix: str) -> Path:
    # pytest's tmp paths are too long for a socket path (ssh's ControlPath and tmux's socket alike)
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


@dataclass
class Remote:
    """One test's remote side: the route, the private TMUX_TMPDIR there, and the servers to end afterwards."""

    sshd: Sshd
    route: Route
    tmpdir: Path
    env: dict[str, str]  # the local environment the backend is called with
    servers: list[str]

    def server(self) -> str:
        name = f"mam-rt-{uuid.uuid4().hex[:8]}"
        self.servers.append(name)
        return name

    def ctx(self, env: dict[str, str] | None = None) -> CallContext:
        return CallContext(timeout=10.0, env=env or self.env)

    def bctx(self, log: Path, env: dict[str, str] | None = None) -> BootstrapContext:
        return BootstrapContext(timeout=10.0, wait=10.0, env=env or self.env, log_path=log, cwd=log.parent)

    def tmux(self, server: str, *args: str) -> CommandResult:
        """A tmux command of the test's own, run on the remote side through the same route."""
        with remote_route(self.route):
            return runner.run(["tmux", "-L", server, *args], timeout=30, env=self.env)


def _route(sshd: Sshd, control: Path, tmpdir: Path, home: Path, *, config: Path | None = None) -> Route:
    scrub = [rule.pattern for rule in DEFAULT_RULES] + ["TMUX", "TMUX_PANE", "HERDR_*", "MAM_SHIM_GUARD"]
    transport = SshTransport(sshd.host, control, 10, ssh_config=config or sshd.config_path)
    return Route(transport, unset_patterns([ScrubRule(p, "test") for p in scrub], keep_rules((), "test")),
                 {"TMUX_TMPDIR": str(tmpdir), "HOME": str(home)})


@pytest.fixture
def remote(sshd: Sshd, tmp_path: Path) -> Iterator[Remote]:
    control = _short_dir("mr") / "ssh"
    tmpdir = _short_dir("mt")
    env = base_env(tmp_path, MAM_TMUX_CONFIG="/dev/null", TMUX_TMPDIR=str(tmpdir))
    side = Remote(sshd, _route(sshd, control, tmpdir, tmp_path), tmpdir, env, [])
    try:
        yield side
    finally:
        for server in side.servers:  # the remote side is this machine: end its servers directly
            subprocess.run(["tmux", "-L", server, "kill-server"], env=env, capture_output=True, timeout=30,
                           stdin=subprocess.DEVNULL)
        sshd.close_masters(control)
        shutil.rmtree(control.parent, ignore_errors=True)
        shutil.rmtree(tmpdir, ignore_errors=True)


def _classify(backend: TmuxBackend, failure: Failure) -> ServerError:
    """What the core makes of a failure: the process facts first, then the backend, never down by default."""
    return process_classification(failure) or backend.classify(failure) or ServerError(ErrorKind.UNKNOWN, "?")


def test_bootstrap_spawn_list_stop_through_ssh(remote: Remote, tmp_path: Path) -> None:
    backend, server = TmuxBackend(), remote.server()
    with remote_route(remote.route):
        first = backend.bootstrap(server, remote.bctx(tmp_path / "logs" / "s.log"))
        assert first.started and first.up, first
        again = backend.bootstrap(server, remote.bctx(tmp_path / "logs" / "s.log"))
        assert again.up and not again.started, again
        assert backend.list_agents(server, remote.ctx()) == ()
        spawned = backend.spawn(server, SpawnRequest("alpha", "claude", str(tmp_path), ("sleep", "600")),
                                remote.ctx())
        assert spawned.ok, spawned
        agents = backend.list_agents(server, remote.ctx())
        assert not isinstance(agents, Failure), agents
        assert [(a.name, a.agent, a.cwd) for a in agents] == [("alpha", "claude", str(tmp_path))]
        stopped = backend.stop(server, "alpha", remote.ctx())
        assert stopped.stopped and stopped.failure is None, stopped
        assert backend.list_agents(server, remote.ctx()) == ()
    # The server runs where the route's TMUX_TMPDIR put it, on the remote side, and answers there.
    assert (remote.tmpdir / f"tmux-{os.getuid()}" / server).is_socket()
    assert remote.tmux(server, "list-sessions", "-F", "#{session_name}").stdout == "_mam_keepalive\n"


def test_a_server_that_is_not_running_reads_down_from_tmux_itself(remote: Remote) -> None:
    backend, server = TmuxBackend(), remote.server()
    with remote_route(remote.route):
        listed = backend.list_agents(server, remote.ctx())
        assert isinstance(listed, Failure) and listed.result.transport_error is None, listed
        assert listed.result.argv[0] == "tmux"  # the backend's own argv, not ssh's
        error = _classify(backend, listed)
    assert error.kind is ErrorKind.SERVER_DOWN, error
    assert str(remote.tmpdir) in error.message  # tmux's own words, from the remote side


def test_a_query_never_starts_a_remote_server(remote: Remote) -> None:
    backend, server = TmuxBackend(), remote.server()
    with remote_route(remote.route):
        assert isinstance(backend.list_agents(server, remote.ctx()), Failure)
        assert isinstance(backend.list_agents(server, remote.ctx()), Failure)
    assert not (remote.tmpdir / f"tmux-{os.getuid()}" / server).exists()


def test_a_stopped_sshd_is_unknown_with_its_reason_never_down(remote: Remote, tmp_path: Path) -> None:
    backend, server = TmuxBackend(), remote.server()
    remote.sshd.stop()
    try:
        with remote_route(remote.route):
            listed = backend.list_agents(server, remote.ctx())
            booted = backend.bootstrap(server, remote.bctx(tmp_path / "s.log"))
    finally:
        remote.sshd.start()
    assert isinstance(listed, Failure)
    error = _classify(backend, listed)
    assert error.kind is ErrorKind.UNKNOWN and error.message.startswith("ssh to mam-test: connection refused"), error
    assert not booted.started and not booted.up and booted.failure is not None
    assert _classify(backend, booted.failure).kind is ErrorKind.UNKNOWN
    assert not (remote.tmpdir / f"tmux-{os.getuid()}" / server).exists()


def test_a_wrong_key_is_a_refused_login_never_down(remote: Remote, tmp_path: Path) -> None:
    backend = TmuxBackend()
    control = _short_dir("mw") / "ssh"
    try:
        route = _route(remote.sshd, control, remote.tmpdir, tmp_path, config=remote.sshd.wrong_key)
        with remote_route(route):
            listed = backend.list_agents(remote.server(), remote.ctx())
            # even where tmux's down words would be the remote answer, ssh's failure is settled first
            assert isinstance(listed, Failure)
            error = _classify(backend, listed)
    finally:
        shutil.rmtree(control.parent, ignore_errors=True)
    assert error.kind is ErrorKind.PERMISSION and error.message.startswith("ssh to mam-test: login refused"), error


def test_an_ssh_failure_outranks_what_the_backend_would_call_down() -> None:
    # A backend classifier that reads "no server running" in any stderr still cannot turn ssh's failure into down.
    result = CommandResult(("tmux",), None, "", "no server running on /tmp/x\n",
                           transport_error=ServerError(ErrorKind.UNKNOWN, "ssh to h: connection refused"))
    error = process_classification(Failure("tmux", "s", result))
    assert error is not None and error.kind is ErrorKind.UNKNOWN and error.message.startswith("ssh to h:")


def test_markers_exported_here_never_reach_the_remote_tmux_server(remote: Remote, tmp_path: Path) -> None:
    # Even a user ssh config that asks ssh to send them: the ssh client never gets them to send.
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n    SendEnv TMUX TMUX_PANE HERDR_* CLAUDECODE\n" + remote.sshd.config_path.read_text())
    control = _short_dir("mm") / "ssh"
    route = _route(remote.sshd, control, remote.tmpdir, tmp_path, config=config)
    backend, server = TmuxBackend(), remote.server()
    marked = {**remote.env, **MARKERS}
    try:
        with remote_route(route):
            booted = backend.bootstrap(server, remote.bctx(tmp_path / "s.log", marked))
            assert booted.started and booted.up, booted
            shown = runner.run(["tmux", "-L", server, "show-environment", "-g"], timeout=30, env=marked)
    finally:
        remote.sshd.close_masters(control)
        shutil.rmtree(control.parent, ignore_errors=True)
    assert shown.returncode == 0, shown
    names = {line.split("=", 1)[0].lstrip("-") for line in shown.stdout.splitlines()}
    assert not names & set(MARKERS), shown.stdout
    assert f"TMUX_TMPDIR={remote.tmpdir}" in shown.stdout.splitlines()  # what the route sets there did arrive


def test_parallel_workers_each_enter_their_route(remote: Remote) -> None:
    # Context variables do not cross into new threads: the worker enters the route itself.
    from concurrent.futures import ThreadPoolExecutor

    backend = TmuxBackend()
    servers = [remote.server() for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda s: with_route(remote.route, backend.list_agents, s, remote.ctx()), servers))
        # ...and a worker given no route runs here: tmux answers from this machine's (same) socket folder
        local = pool.submit(backend.list_agents, servers[0], remote.ctx()).result()
    for answer in answers:
        assert isinstance(answer, Failure) and answer.result.transport_error is None
        assert _classify(backend, answer).kind is ErrorKind.SERVER_DOWN
    assert isinstance(local, Failure) and local.result.argv[0] == "tmux"
    assert current_route() is None


def test_a_program_missing_on_the_remote_side_is_not_installed(remote: Remote) -> None:
    with remote_route(remote.route):
        result = runner.run(["mam-no-such-program", "x"], timeout=30, env=remote.env)
    error = process_classification(Failure("x", "s", result))
    assert result.not_found and error is not None and error.kind is ErrorKind.NOT_INSTALLED, result
    assert "on mam-test" in error.message


def test_stdin_bytes_reach_a_program_here_and_on_the_remote_side(remote: Remote) -> None:
    """`mam send` loads a paste into tmux from stdin: the bytes arrive whole, here and through ssh (also from a
    batched route, whose shared session has no stdin to give: such a call runs on its own)."""
    text = ("line one\nline two é\n" * 8000).encode()  # more than a pipe holds at once
    assert runner.run(["cat"], timeout=30, env=remote.env, stdin=text).stdout.encode() == text
    assert runner.run(["cat"], timeout=30, env=remote.env).stdout == ""  # /dev/null without stdin
    with remote_route(remote.route):
        assert runner.run(["cat"], timeout=30, env=remote.env, stdin=text).stdout.encode() == text
    batched = remote.route.batched(1, window=30)
    assert with_route(batched, runner.run, ["cat"], timeout=30, env=remote.env, stdin=b"a\nb").stdout == "a\nb"


# --- the route of a command, from its App ---------------------------------------------------------------------

def _app(tmp_path: Path, sshd: Sshd, **variables: str) -> App:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return App.open(str(ws), "tmux", base_env(tmp_path, MAM_SSH_CONFIG=str(sshd.config_path), **variables))


def test_the_route_of_an_app_unsets_every_scrubbed_pattern_and_sets_mam_ssh_env(sshd: Sshd, tmp_path: Path) -> None:
    app = _app(tmp_path, sshd, MAM_SSH_ENV="TMUX_TMPDIR=/tmp/x  MAM_MARK=a=b", MAM_TIMEOUT="8")
    route = build_route(app, "mam-test")
    assert route is not None and route.host == "mam-test"
    assert route.env_set == {"TMUX_TMPDIR": "/tmp/x", "MAM_MARK": "a=b"}
    assert {"TMUX", "TMUX_PANE", "CLAUDECODE", "CLAUDE_CODE_*", "AGENT", "MAM_SHIM_GUARD"} <= set(route.env_unset)
    assert "HOME" not in route.env_unset and "PATH" not in route.env_unset
    assert route.transport.ssh_config == sshd.config_path and route.transport.timeout == 8
    assert route.transport.control_dir == app.workspace.dot_mam / "ssh"
    routes = Routes(app)
    assert routes.get("mam-test") is routes.get("mam-test")  # one per host per command
    assert routes.get("local") is None and routes.get(None) is None and build_route(app, "") is None


def test_the_route_of_an_app_reaches_the_remote_side(sshd: Sshd, tmp_path: Path) -> None:
    app = _app(tmp_path, sshd, MAM_SSH_ENV="MAM_MARK=here")
    route = build_route(app, "mam-test")
    assert route is not None
    try:
        with remote_route(route):
            result = runner.run(["sh", "-c", 'echo "$MAM_MARK"'], timeout=30, env=app.env)
        assert (result.returncode, result.stdout) == (0, "here\n"), result
    finally:
        sshd.close_masters(route.transport.socket_dir())


def test_a_config_keep_rule_leaves_its_variable_on_the_remote_side(sshd: Sshd, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".mam").mkdir(parents=True)
    (ws / ".mam" / "config.yaml").write_text("env:\n  scrub: [MY_MARK, MY_*]\n  keep: [MY_MARK, CLAUDECODE]\n")
    config = tmp_path / "config"
    route = build_route(_app(tmp_path, sshd, XDG_CONFIG_HOME=str(config)), "mam-test")
    assert route is not None
    assert "MY_*" in route.env_unset and "MY_MARK" not in route.env_unset
    # A workspace keeps no marker, there as here; the user's own config may.
    assert "CLAUDECODE" in route.env_unset
    (config / "mam").mkdir(parents=True)
    (config / "mam" / "config.yaml").write_text("env:\n  keep: [CLAUDECODE]\n")
    route = build_route(_app(tmp_path, sshd, XDG_CONFIG_HOME=str(config)), "mam-test")
    assert route is not None and "CLAUDECODE" not in route.env_unset


@pytest.mark.parametrize("host", ["-oProxyCommand=touch /tmp/x", "-p", "a b", "h;id"])
def test_a_host_ssh_could_read_as_an_option_is_refused(sshd: Sshd, tmp_path: Path, host: str) -> None:
    with pytest.raises(MamError) as caught:
        build_route(_app(tmp_path, sshd), host)
    assert caught.value.exit_code == 2 and caught.value.message.startswith("invalid host")


@pytest.mark.parametrize("raw", ["NOEQUALS", "1X=a", "A-B=c", "=v"])
def test_a_bad_mam_ssh_env_is_a_usage_error(raw: str) -> None:
    with pytest.raises(MamError) as caught:
        parse_ssh_env(raw)
    assert caught.value.exit_code == 2 and "$MAM_SSH_ENV" in caught.value.message


# --- the backend kit, every check through the transport -------------------------------------------------------

class TestTmuxContractOverSsh(test_contract.TestTmuxContract):
    """The live tmux contract with every backend call on the remote side: the servers the fixtures make here
    under TMUX_TMPDIR are the remote side's, since the route sets the same TMUX_TMPDIR there."""

    @pytest.fixture(autouse=True)
    def _over_ssh(self, sshd: Sshd, env: dict[str, str], tmp_path: Path) -> Iterator[None]:
        control = _short_dir("mc") / "ssh"
        route = _route(sshd, control, Path(env["TMUX_TMPDIR"]), tmp_path)
        try:
            with remote_route(route):
                yield
        finally:
            sshd.close_masters(control)
            shutil.rmtree(control.parent, ignore_errors=True)


# --- one ssh session for the calls of a fan-out (Route.batched) -----------------------------------------------

PRINT_ARGV = ["python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))"]
HOSTILE = ["a b", "it's", "$(touch /tmp/mam-pwned)", "`id`", "x\ny", "#{pane_id}", "-V", "--", "", "*", "~",
           "é", "%C", "${HOME}", "'", "a=b", "\nmam-0 e\n", "\\"]
SHOW_ENV = ["python3", "-c", "import os, json; print(json.dumps(sorted(os.environ)))"]


def _together(route: Route, argvs: list[list[str]], env: dict[str, str]) -> list[CommandResult]:
    from concurrent.futures import ThreadPoolExecutor

    batched = route.batched(len(argvs), window=30)  # all of them, however late a worker starts
    with ThreadPoolExecutor(len(argvs)) as pool:
        return list(pool.map(lambda argv: with_route(batched, runner.run, argv, timeout=30, env=env), argvs))


def test_calls_made_together_share_one_session_and_each_gets_its_own_answer(remote: Remote) -> None:
    argvs = [[*PRINT_ARGV, *HOSTILE], ["sh", "-c", "printf 'no newline'; printf 'to stderr' >&2; exit 3"],
             ["mam-no-such-program"], SHOW_ENV]
    together = _together(remote.route, argvs, {**remote.env, **MARKERS})
    alone = [with_route(remote.route, runner.run, argv, timeout=30, env={**remote.env, **MARKERS}) for argv in argvs]
    import json

    assert json.loads(together[0].stdout) == HOSTILE and together[0].returncode == 0, together[0]
    assert (together[1].returncode, together[1].stdout, together[1].stderr) == (3, "no newline", "to stderr")
    assert together[2].not_found and process_classification(Failure("x", "s", together[2])) is not None
    # The route's environment holds for each: the markers unset there, MAM_SSH_ENV's variables set.
    names = set(json.loads(together[3].stdout))
    assert not names & set(MARKERS) and "TMUX_TMPDIR" in names, names
    assert not set(json.loads(alone[3].stdout)) & set(MARKERS)
    assert [(r.returncode, r.stdout, r.stderr) for r in together[:2]] == \
        [(r.returncode, r.stdout, r.stderr) for r in alone[:2]]
    assert not Path("/tmp/mam-pwned").exists()
    # One session: the calls made together are children of one remote shell; alone, each is sshd's own child.
    parent = ["sh", "-c", 'echo "$PPID $(ps -o comm= -p "$PPID")"']
    batched = {r.stdout.split()[0]: r.stdout.split()[1] for r in _together(remote.route, [parent] * 3, remote.env)}
    assert len(batched) == 1 and list(batched.values()) == ["sh"], batched
    assert with_route(remote.route, runner.run, parent, timeout=30, env=remote.env).stdout.split()[1] == "sshd"


def test_a_batched_fan_out_of_listings_answers_as_the_calls_alone(remote: Remote, tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    backend = TmuxBackend()
    servers = [remote.server() for _ in range(3)]
    with remote_route(remote.route):
        for server in servers[:2]:
            booted = backend.bootstrap(server, remote.bctx(tmp_path / f"{server}.log"))
            assert booted.up, booted
        assert backend.spawn(servers[0], SpawnRequest("alpha", "claude", str(tmp_path), ("sleep", "600")),
                             remote.ctx()).ok
    batched = remote.route.batched(len(servers), window=30)
    with ThreadPoolExecutor(len(servers)) as pool:
        answers = list(pool.map(lambda s: with_route(batched, backend.list_agents, s, remote.ctx()), servers))
    assert not isinstance(answers[0], Failure) and [a.name for a in answers[0]] == ["alpha"]
    assert answers[1] == ()
    assert isinstance(answers[2], Failure)
    with remote_route(remote.route):
        assert _classify(backend, answers[2]).kind is ErrorKind.SERVER_DOWN
    # Later calls of the same fan-out (status reads the panes next) do not wait for a wave of that size again.
    assert batched.batch is not None and batched.batch.expected is None
    assert with_route(batched, backend.list_agents, servers[1], remote.ctx()) == ()


def test_a_batch_to_a_stopped_sshd_is_unknown_for_every_call(remote: Remote) -> None:
    remote.sshd.stop()
    try:
        results = _together(remote.route, [["true"], ["tmux", "-V"], ["true"]], remote.env)
    finally:
        remote.sshd.start()
    for result in results:
        error = process_classification(Failure("tmux", "s", result))
        assert error is not None and error.kind is ErrorKind.UNKNOWN and "connection refused" in error.message


def test_an_interactive_client_gets_a_terminal_and_the_route_s_environment(remote: Remote) -> None:
    argv = remote.route.client_argv(["tmux", "-L", "s", "attach"])
    dash = argv.index("--")
    assert argv[0] == "ssh" and "-t" in argv[:dash] and "BatchMode=yes" in argv[:dash]
    assert argv[dash + 1] == "mam-test" and len(argv) == dash + 3  # one command string for the remote shell
    assert "-u TMUX " in argv[-1] and argv[-1].endswith("tmux -L s attach")
    assert f"TMUX_TMPDIR={remote.tmpdir}" in argv[-1]
