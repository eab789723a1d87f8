"""Third-party plugins found through the `mam.backends` entry point group: good, broken and clashing ones
never take the CLI down; only selecting a broken backend fails (exit 4)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from conftest import Workspace

PLUGINS = {
    "mam_broken_plugin.py": '''
        import nonexistent_dependency_of_broken  # fails at import time
    ''',
    "mam_badhook_plugin.py": '''
        from mam.plugin.spec import hookimpl

        @hookimpl
        def mam_list_agent(backend, server, ctx):  # misspelled: must be caught, not silently ignored
            return ()
    ''',
    "mam_clash_plugin.py": '''
        from mam.plugin.spec import hookimpl
        from mam.plugin.records import BackendSpec

        @hookimpl
        def mam_backends():
            return [BackendSpec("herdr", "an impostor", "herdr", lambda: None)]
    ''',
}
ENTRY_POINTS = {"broken": "mam_broken_plugin", "badhook": "mam_badhook_plugin",
                "clash": "mam_clash_plugin"}


@pytest.fixture
def plugin_env(ws: Workspace, tmp_path: Path, echo_site: Path) -> dict[str, str]:
    """The pip-installed mam-echo, plus broken plugins declared by a hand-made dist-info."""
    site = tmp_path / "site"
    site.mkdir()
    for name, source in PLUGINS.items():
        (site / name).write_text(textwrap.dedent(source))
    dist = site / "mam_test_plugins-2.5.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mam-test-plugins\nVersion: 2.5.0\n")
    (dist / "entry_points.txt").write_text(
        "[mam.backends]\n" + "".join(f"{k} = {v}\n" for k, v in ENTRY_POINTS.items()))
    # the mam under test stays importable (a worktree's own, when PYTHONPATH names it)
    path = [str(echo_site), str(site), *filter(None, [ws.env.get("PYTHONPATH")])]
    return {**ws.env, "PYTHONPATH": os.pathsep.join(path)}


def test_broken_plugins_leave_herdr_working(ws: Workspace, plugin_env: dict[str, str]) -> None:
    ws.write_registry("sessions:\n  - {name: a, server: s1, status: running}\n")
    doc = ws.mam_json("--backend", "herdr", "status", env=plugin_env)
    assert doc["servers"][0]["state"] == "down"
    doc = ws.mam_json("status", env=plugin_env)
    assert doc["servers"][0]["state"] == "down"


def test_backends_reports_each_problem(ws: Workspace, plugin_env: dict[str, str]) -> None:
    doc = ws.mam_json("backends", env=plugin_env)
    by_name = {}
    for entry in doc["backends"]:
        by_name.setdefault(entry["name"], entry)
    assert by_name["echo"]["error"] is None and by_name["echo"]["provider"] == "mam-echo 1.2.0"
    assert "nonexistent_dependency_of_broken" in by_name["broken"]["error"]
    assert "mam_list_agent" in by_name["badhook"]["error"]
    clash = [e for e in doc["backends"] if e["name"] == "clash"][0]
    assert "declared by both mam (built in) and mam-test-plugins 2.5.0" in clash["error"]
    herdr = by_name["herdr"]
    assert herdr["provider"] == "mam (built in)" and herdr["error"] is None


def test_selecting_a_broken_backend_exits_4(ws: Workspace, plugin_env: dict[str, str]) -> None:
    proc = ws.mam("--backend", "broken", "status", "--json", env=plugin_env)
    assert proc.returncode == 4
    line = proc.stderr.splitlines()[0]
    assert line.startswith("mam: backend 'broken' (mam-test-plugins 2.5.0) failed to load: ModuleNotFoundError")
    assert json.loads(proc.stdout)["error"]["code"] == "plugin_load_failed"


def test_third_party_backend_works_end_to_end(ws: Workspace, plugin_env: dict[str, str]) -> None:
    ws.write_registry("sessions:\n  - {name: a, backend: echo, server: e1, status: running}\n"
                      "  - {name: gone, backend: echo, server: e2, status: running}\n")
    env = {**plugin_env, "ECHO_AGENTS": json.dumps({"e1": ["a", "b"]})}
    doc = ws.mam_json("--backend", "echo", "reconcile", env=env)
    assert {s["server"]: s["state"] for s in doc["servers"]} == {"e1": "up", "e2": "down"}
    assert [(d["class"], d["name"]) for d in doc["drifts"]] == [("A", "gone"), ("B", "b")]


def test_allow_and_block_lists(ws: Workspace, plugin_env: dict[str, str]) -> None:
    only_builtins = {**plugin_env, "MAM_LOAD_PLUGINS": ""}
    names = {b["name"] for b in ws.mam_json("backends", env=only_builtins)["backends"]}
    assert names == {"herdr"}
    assert ws.mam("--backend", "echo", "status", env=only_builtins).returncode == 3
    allow_echo = {**plugin_env, "MAM_LOAD_PLUGINS": "echo"}
    names = {b["name"] for b in ws.mam_json("backends", env=allow_echo)["backends"]}
    assert names == {"herdr", "echo"}
    blocked = {**plugin_env, "MAM_DISABLE_PLUGINS": "broken,badhook,clash"}
    doc = ws.mam_json("backends", env=blocked)
    assert all(b["error"] is None for b in doc["backends"])


def test_status_imports_only_the_backends_it_needs(ws: Workspace, plugin_env: dict[str, str]) -> None:
    from test_cli import _modules_after

    ws.write_registry("sessions:\n  - {name: a, server: s1, status: running}\n")
    modules = _modules_after(["status", "--json"], plugin_env, ws.root)
    assert "mam_herdr.backend" in modules
    assert not {"mam_broken_plugin", "mam_echo", "mam_tmux", "mam_tmux.backend"} & modules


def test_a_backend_without_stop_or_exec_is_refused_and_the_row_kept(ws: Workspace, plugin_env: dict[str, str]) -> None:
    ws.write_registry("sessions:\n  - {name: a, backend: echo, server: e1, status: running}\n")
    before = ws.registry.read_bytes()
    env = {**plugin_env, "ECHO_AGENTS": json.dumps({"e1": ["a"]})}
    for args in (["stop", "a"], ["spawn", "b", "--command", "sleep 1", "--server", "e1"],
                 ["exec", "--server", "e1", "--", "x"]):
        proc = ws.mam("--backend", "echo", *args, env=env)
        assert proc.returncode == 1, (args, proc.stderr)
        assert proc.stderr.startswith("mam: backend echo cannot "), proc.stderr
    assert ws.registry.read_bytes() == before  # not marked terminated: the agent still runs


def test_a_third_party_backends_markers_are_scrubbed_from_its_own_queries(ws: Workspace,
                                                                          plugin_env: dict[str, str]) -> None:
    """The client environment is built after the rows' backends are loaded, so their scrub rules apply."""
    ws.write_registry("sessions:\n  - {name: a, backend: echo, server: e1, status: running}\n")
    env = {**plugin_env, "ECHO_PANE": "pane-of-the-calling-agent", "ECHO_AGENTS": '{"e1": ["a"]}'}
    for args in (["status"], ["reconcile"]):
        doc = ws.mam_json(*args, env=env)
        assert doc["servers"][0]["state"] == "up", doc["servers"]
