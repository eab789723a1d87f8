"""Plugins import only mam's public plugin API, mam.api: the shipped backends and the test plugin prove it."""

from __future__ import annotations

import ast
from pathlib import Path

import mam.api

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_SOURCES = sorted([*(ROOT / "backends").glob("mam_*/*.py"),
                         *(ROOT / "tests" / "plugins" / "mam-echo" / "mam_echo").glob("*.py"),
                         *(ROOT / "tests" / "plugins" / "mam-minitmux" / "mam_minitmux").glob("*.py")])


def _mam_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mam":
            found.add(node.module if node.module != "mam" else "mam." + ",".join(a.name for a in node.names))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "mam")
    return found


def test_backends_and_the_test_plugin_import_only_mam_api() -> None:
    assert len(PLUGIN_SOURCES) >= 8
    for path in PLUGIN_SOURCES:
        assert _mam_imports(path) <= {"mam.api"}, (path, _mam_imports(path))


def test_the_api_exports_what_it_lists() -> None:
    for name in mam.api.__all__:
        assert getattr(mam.api, name) is not None
    assert mam.api.first_line("\n  two\nthree") == "two"
    assert mam.api.poll_until(lambda: None, wait=0) is None
    calls = iter([None, None, 3])
    assert mam.api.poll_until(lambda: next(calls), wait=5, interval=0) == 3


def test_the_app_does_not_import_exec() -> None:
    """The scrubbed environment needs the shim folders, not `mam exec`: no cycle app -> passthrough -> app."""
    import subprocess
    import sys

    code = "import sys, mam.servers.app; print('mam.commands.passthrough' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


def test_each_backends_marker_names_are_written_once_in_its_backend_spec() -> None:
    """The scrub rules, the client environment and the shims are built from BackendSpec: a multiplexer's marker
    names appear once, in its plugin module or (when its working module needs them too) in its package's
    __init__.py below both; never again in the core or in its own working module."""
    markers = {"mam_tmux": ('"TMUX_PANE"',), "mam_zellij": ('"ZELLIJ_PANE_ID"', '"ZELLIJ_SESSION_NAME"'),
               "mam_herdr": ('"HERDR_PANE_ID"', '"HERDR_SOCKET_PATH"')}
    declared = {"mam_tmux": "__init__.py", "mam_zellij": "__init__.py", "mam_herdr": "plugin.py"}
    sources = [*(ROOT / "mam").rglob("*.py"), *(ROOT / "backends").rglob("*.py")]
    for package, names in markers.items():
        holders = sorted(str(p.relative_to(ROOT)) for p in sources if any(n in p.read_text() for n in names))
        assert holders == [f"backends/{package}/{declared[package]}"], (package, holders)


def test_scrub_rules_come_from_every_declared_backends_markers() -> None:
    from mam.plugin.manager import Plugins

    plugins = Plugins({})
    rules = {(r.pattern, r.source) for r in plugins.scrub_rules()}
    for spec in plugins.specs():
        assert spec.markers, spec.name
        assert {(m, f"backend {spec.name}") for m in spec.markers} <= rules


def test_shims_are_the_backends_that_declare_how_to_pick_a_server() -> None:
    from mam.calls.shims import shimmed_backends
    from mam.plugin.manager import Plugins

    assert shimmed_backends(Plugins({}).specs()) == {"herdr": "herdr", "tmux": "tmux", "zellij": "zellij"}
