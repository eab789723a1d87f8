"""Every hook is implemented by a test plugin and reached through the plugin manager, never around it.

tests/plugins/mam-wrap declares no backend and implements every hook; for the echo backend (no `spawn`,
`stop`, `client_argv`, `send_text` or states of its own) it answers those hooks itself. Also here: the
`MAM_TRACE_PLUGINS` trace, the `mam backends` list of such plugins, and the checks made when a plugin
registers (a backend name --backend could never select, a hook API newer than this mam's).
"""

from __future__ import annotations

import ast
import json
import os
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

import mam.plugin.spec
from conftest import Workspace
from mam.plugin.manager import Plugins
from mam.plugin.records import (
    Agent,
    CallContext,
    CommandResult,
    ErrorKind,
    Failure,
    ServerError,
    StopResult,
)
from mam.plugin.spec import hookimpl

WRAP = Path(__file__).parent / "plugins" / "mam-wrap"
HOOKS = sorted(name for name in dir(mam.plugin.spec) if name.startswith("mam_"))


def _dist(site: Path, name: str, version: str, entry_points: dict[str, str]) -> None:
    """A hand-made dist-info in `site`, as pip would leave it, declaring `entry_points` in `mam.backends`."""
    dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    declared = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    (dist / "entry_points.txt").write_text("[mam.backends]\n" + declared)


@pytest.fixture
def wrap_site(tmp_path: Path) -> Path:
    """mam-wrap, installed the way pip would (its metadata in a site folder, its code from tests/plugins)."""
    site = tmp_path / "wrap-site"
    _dist(site, "mam-wrap", "0.3.0", {"wrap": "mam_wrap.plugin"})
    return site


@pytest.fixture
def wrap_env(ws: Workspace, tmp_path: Path, echo_site: Path, wrap_site: Path) -> dict[str, str]:
    path = [str(echo_site), str(wrap_site), str(WRAP), *filter(None, [ws.env.get("PYTHONPATH")])]
    return {**ws.env, "PYTHONPATH": os.pathsep.join(path),
            "MAM_WRAP_STATE": str(tmp_path / "wrap-state.json"), "MAM_WRAP_LOG": str(tmp_path / "wrap-log"),
            "ECHO_AGENTS": json.dumps({"e1": ["a"]})}


def _called(env: dict[str, str]) -> list[dict[str, Any]]:
    path = Path(env["MAM_WRAP_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_test_plugin_implements_every_hook() -> None:
    """As datasette's test_plugin_hooks_have_tests: a new hook without a test plugin fails here."""
    tree = ast.parse((WRAP / "mam_wrap" / "plugin.py").read_text())
    implemented = sorted(node.name for node in tree.body if isinstance(node, ast.FunctionDef)
                         and any(ast.unparse(d) == "hookimpl" for d in node.decorator_list))
    assert len(HOOKS) == 12
    assert implemented == HOOKS


def test_a_wrapper_answers_the_operations_of_a_backend_without_them(ws: Workspace, wrap_env: dict[str, str]) -> None:
    """echo has no spawn, stop, client_argv or send_text; the wrapper implements their hooks, so mam asks it
    instead of refusing before the hook runs (without mam-wrap the same commands are refused: test_plugins)."""
    proc = ws.mam("--backend", "echo", "spawn", "b", "--command", "sleep 60", "--server", "e1", env=wrap_env)
    assert proc.returncode == 0, proc.stderr
    row = ws.mam_json("status", env=wrap_env)["sessions"][0]  # listed by the wrapper: spawn waited for that
    assert (row["name"], row["backend"], row["status"]) == ("b", "echo", "running")

    sent = ws.mam_json("send", "b", "hello there", env=wrap_env)
    assert sent["name"] == "b"
    # echo does not say it pastes several lines as one (`pastes_lines`): such a text never reaches a hook.
    proc = ws.mam("send", "b", "one\ntwo", "--enter", env=wrap_env)
    assert proc.returncode == 1 and "cannot send several lines as one paste" in proc.stderr, proc.stderr

    proc = ws.mam("--backend", "echo", "exec", "--server", "e1", "--", "hi", env=wrap_env)
    assert (proc.returncode, proc.stdout) == (0, "echo-server=e1 hi\n"), proc.stderr

    proc = ws.mam("--backend", "echo", "stop", "b", env=wrap_env)
    assert proc.returncode == 0, proc.stderr
    assert "wrap stopped b" in proc.stdout
    assert json.loads(Path(wrap_env["MAM_WRAP_STATE"]).read_text()) == {"e1": []}

    calls = _called(wrap_env)
    assert {"hook": "mam_send_text", "backend": "echo", "server": "e1", "name": "b", "text": "hello there",
            "enter": False} in calls
    assert [c["text"] for c in calls if c["hook"] == "mam_send_text"] == ["hello there"]
    for hook in ("mam_spawn_agent", "mam_stop_agent", "mam_client_argv"):
        assert any(c["hook"] == hook and c["backend"] == "echo" for c in calls), hook


def test_a_wrapper_that_declines_leaves_the_refusal_to_the_core(ws: Workspace, wrap_env: dict[str, str]) -> None:
    """Without $MAM_WRAP_STATE the wrapper returns None for echo too: the core refuses, and says why; the row
    it had claimed is settled (nothing was started), not left `starting`."""
    env = {k: v for k, v in wrap_env.items() if k != "MAM_WRAP_STATE"}
    proc = ws.mam("--backend", "echo", "spawn", "z", "--command", "sleep 60", "--server", "e1", env=env)
    assert proc.returncode == 1
    assert proc.stderr.startswith("mam: echo did not start z: backend echo cannot start agents"), proc.stderr
    row = ws.mam_json("status", env=env)["sessions"][0]
    assert (row["name"], row["status"]) == ("z", "terminated")
    ws.write_registry("sessions:\n  - {name: a, backend: echo, server: e1, status: running}\n")
    for args in (["send", "a", "hi"], ["--backend", "echo", "stop", "--force", "a", "--server", "e1"]):
        proc = ws.mam(*args, env=env)
        assert proc.returncode == 1 and "mam: backend echo cannot " in proc.stderr, (args, proc.stderr)


def test_the_other_hooks_are_called_by_the_commands_that_use_them(ws: Workspace, wrap_env: dict[str, str]) -> None:
    assert ws.mam("--backend", "echo", "bootstrap", "--server", "e1", env=wrap_env).returncode == 0
    doc = ws.mam_json("env", env={**wrap_env, "WRAP_SECRET": "x"})
    assert {"name": "WRAP_SECRET", "rule": "WRAP_SECRET", "source": "plugin wrap"}.items() <= next(
        d for d in doc["removed"] if d["name"] == "WRAP_SECRET").items()
    calls = _called(wrap_env)
    assert {"hook": "mam_bootstrap_server", "backend": "echo", "server": "e1"} in calls
    assert {"mam_backends", "mam_env_scrub_rules"} <= {c["hook"] for c in calls}


def _wrapped_plugins(monkeypatch: pytest.MonkeyPatch, echo_site: Path, wrap_site: Path,
                     tmp_path: Path) -> Plugins:
    for folder in (echo_site, wrap_site, WRAP):
        monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("MAM_WRAP_STATE", str(tmp_path / "wrap-state.json"))
    monkeypatch.setenv("MAM_WRAP_LOG", str(tmp_path / "wrap-log"))
    plugins = Plugins({"PATH": os.environ.get("PATH", "")})
    plugins.read_entry_points()
    assert not plugins.problems and "wrap" in {name for name, _ in plugins.pm.list_name_plugin()}
    return plugins


def test_state_hooks_answer_for_a_backend_without_states(monkeypatch: pytest.MonkeyPatch, echo_site: Path,
                                                         wrap_site: Path, tmp_path: Path) -> None:
    from mam.agents.agentstate import server_states, settle
    from mam.kinds.library import load_library

    plugins = _wrapped_plugins(monkeypatch, echo_site, wrap_site, tmp_path)
    agents = (Agent("a", agent="echo"), Agent("b", agent="wrapped"))
    ctx = CallContext(timeout=5, env={})
    states = settle(server_states(plugins, "echo", "e1", agents, {}, ctx), lambda: load_library(None))
    assert states["b"].source == "backend" and states["b"].state == "idle"  # mam_agent_state
    assert states["a"].source == "screen"  # mam_capture_panes: the wrapper's dead pane
    calls = _called({"MAM_WRAP_LOG": str(tmp_path / "wrap-log")})
    assert {"hook": "mam_capture_panes", "backend": "echo", "server": "e1", "names": ["a"]} in calls
    assert {c["name"] for c in calls if c["hook"] == "mam_agent_state"} == {"a", "b"}
    # And a failure is classified through the hook (the wrapper recognises nothing: echo's classify answers).
    down = Failure("echo", "nowhere", CommandResult(("echo", "nowhere"), 1, "", "echo: no such server"))
    assert plugins.classify(plugins.backend("echo"), down).kind is ErrorKind.SERVER_DOWN
    assert {"hook": "mam_classify_error", "backend": "echo", "server": "nowhere"} in _called(
        {"MAM_WRAP_LOG": str(tmp_path / "wrap-log")})


# find_for_stop lists and classifies through the hooks.

class _ListsThenTimesOut:
    """A backend whose listing ran past its time limit, and whose own classify (wrongly) calls that down."""

    name = "slow"

    def list_agents(self, server: str, ctx: CallContext) -> Failure:
        return Failure(self.name, server, CommandResult(("slow",), None, "", "no server running", timed_out=True,
                                                        timeout=1))

    def classify(self, failure: Failure) -> ServerError:
        return ServerError(ErrorKind.SERVER_DOWN, "down, it says")

    def stop(self, server: str, name: str, ctx: CallContext) -> StopResult:
        from mam.api import find_for_stop

        found = find_for_stop(self, server, name, ctx)
        assert isinstance(found, StopResult)
        return found


class _Counts:
    def __init__(self) -> None:
        self.listed: list[str] = []

    @hookimpl
    def mam_list_agents(self, backend: Any, server: str, ctx: CallContext) -> None:
        self.listed.append(f"{backend.name}/{server}")


def test_find_for_stop_goes_through_the_hooks_and_the_process_facts() -> None:
    plugins = Plugins({})
    counter = _Counts()
    plugins.pm.register(counter)
    result = plugins.stop(_ListsThenTimesOut(), "s1", "x", CallContext(timeout=1, env={}))  # type: ignore[arg-type]
    assert counter.listed == ["slow/s1"]  # the list hook ran: a wrapper sees the listing of a stop
    # A time-out is a fact about the process: never "down", whatever the backend's classify says.
    assert not result.stopped and result.failure is not None
    assert result.message == "could not list the agents of slow server s1"


def test_find_for_stop_without_a_plugin_manager_asks_the_backend() -> None:
    """The conformance kit drives a backend alone: find_for_stop then asks the backend itself, as before."""
    result = _ListsThenTimesOut().stop("s1", "x", CallContext(timeout=1, env={}))
    assert (result.stopped, result.failure) == (False, None) and result.message == "slow server s1 is down"


# The trace, and `mam backends`.

TRACE = re.compile(r"mam: trace (mam_[a-z_]+)(?: backend=([\w.-]+))? plugins=([\w.,-]+) [0-9]+\.[0-9]ms")


def test_trace_plugins_prints_one_line_per_hook_call(ws: Workspace, wrap_env: dict[str, str]) -> None:
    quiet = ws.mam("--backend", "echo", "stop", "--force", "zz", "--server", "e1", env=wrap_env)
    assert "mam: trace" not in quiet.stderr
    traced = ws.mam("--backend", "echo", "stop", "--force", "zz", "--server", "e1",
                    env={**wrap_env, "MAM_TRACE_PLUGINS": "1"})
    assert traced.stdout == quiet.stdout and traced.returncode == quiet.returncode == 0
    lines = [line for line in traced.stderr.splitlines() if line.startswith("mam: trace")]
    found = [TRACE.fullmatch(line) for line in lines]
    assert all(found), lines
    assert ("mam_stop_agent", "echo", "wrap,mam.plugin.builtin") in [m.groups() for m in found if m]


def test_backends_lists_the_plugins_that_declare_no_backend(ws: Workspace, wrap_env: dict[str, str]) -> None:
    doc = ws.mam_json("backends", env=wrap_env)
    assert doc["plugins"] == [{"name": "wrap", "provider": "mam-wrap 0.3.0", "hooks": HOOKS}]
    assert "wrap" not in {b["name"] for b in doc["backends"]}
    text = ws.mam("backends", env=wrap_env).stdout
    assert re.search(r"^PLUGIN +PROVIDER +HOOKS$", text, flags=re.MULTILINE), text
    assert re.search(r"^wrap +mam-wrap 0\.3\.0 +mam_agent_remains, mam_agent_state, ", text, flags=re.MULTILINE), text
    assert ws.mam_json("backends", env=ws.env)["plugins"] == []


# Checked when a plugin registers.

REGISTERING = {
    "mam_badname_plugin.py": '''
        from mam.api import BackendSpec, hookimpl

        @hookimpl
        def mam_backends():
            return [BackendSpec("-x", "a name --backend could never select", None, lambda: None)]
    ''',
    "mam_future_plugin.py": f'''
        from mam.api import BackendSpec, hookimpl

        NEEDS_HOOK_API = {mam.plugin.spec.HOOK_API + 1}

        @hookimpl
        def mam_backends():
            return [BackendSpec("future", "written for a newer mam", None, lambda: None)]
    ''',
    "mam_current_plugin.py": f'''
        from mam.api import BackendSpec, hookimpl

        NEEDS_HOOK_API = {mam.plugin.spec.HOOK_API}

        @hookimpl
        def mam_backends():
            return [BackendSpec("current", "written for this mam", None, lambda: None)]
    ''',
    "mam_oddapi_plugin.py": '''
        NEEDS_HOOK_API = "2"
    ''',
}


@pytest.fixture
def registering_env(ws: Workspace, tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "reg-site"
    site.mkdir()
    for name, source in REGISTERING.items():
        (site / name).write_text(textwrap.dedent(source))
    _dist(site, "mam-reg", "1.0.0", {"badname": "mam_badname_plugin", "future": "mam_future_plugin",
                                     "current": "mam_current_plugin", "oddapi": "mam_oddapi_plugin"})
    return {**ws.env, "PYTHONPATH": os.pathsep.join([str(site), *filter(None, [ws.env.get("PYTHONPATH")])])}


def test_registration_refuses_bad_names_and_newer_hook_apis(ws: Workspace, registering_env: dict[str, str]) -> None:
    doc = ws.mam_json("backends", env=registering_env)
    errors = {b["name"]: b["error"] for b in doc["backends"]}
    assert errors["badname"] == ("backend name '-x' is not a name --backend can select (1-64 letters, digits, "
                                 "'.', '_' or '-', starting with a letter or digit)")
    api = mam.plugin.spec.HOOK_API
    assert errors["future"] == f"needs mam hook API {api + 1}, and this mam has hook API {api}: upgrade mam"
    assert errors["oddapi"] == "NEEDS_HOOK_API must be a whole number of at least 1, not '2'"
    assert errors["current"] is None  # a plugin written for this very API loads
    assert "-x" not in errors

    proc = ws.mam("--backend", "future", "status", "--json", env=registering_env)
    assert proc.returncode == 4
    assert proc.stderr.splitlines()[0] == (f"mam: backend 'future' (mam-reg 1.0.0) failed to load: needs mam hook "
                                           f"API {api + 1}, and this mam has hook API {api}: upgrade mam")
