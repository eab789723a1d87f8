"""Plugins import only mam's public plugin API, mam.api: the shipped backends and the test plugin prove it."""

from __future__ import annotations

import ast
from pathlib import Path

import mam.api

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_SOURCES = sorted([*(ROOT / "backends").glob("mam_*/*.py"),
                         *(ROOT / "tests" / "plugins" / "mam-echo" / "mam_echo").glob("*.py")])


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

    code = "import sys, mam.app; print('mam.commands.passthrough' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
