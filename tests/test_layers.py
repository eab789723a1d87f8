"""mam's layers, from the imports its sources write (every import, a lazy one inside a function too):

- the CLI (mam/cli/) on top, the only place the CLI framework (typer, click) is imported;
- the commands (mam/commands/): each one a command, none importing another (shared code lives below them);
- the core below (every other module of mam/), which never imports a command or the CLI;
- the backends (backends/), which import mam.api only;
- Textual only in the `mam top` view, if there is one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAM = ROOT / "mam"
CLI = MAM / "cli"
COMMANDS = MAM / "commands"
ENTRIES = (MAM / "__main__.py", MAM / "entry.py")  # `python3 -m mam` and the `mam` script: they run the CLI
CLI_FRAMEWORKS = {"typer", "click"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str, is_package: bool = False) -> set[str]:
    """The full names `source` (of `module`) imports; `from a import b` gives both a and a.b, since b may be a
    module of a."""
    found: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _imports(path: Path) -> set[str]:
    return imports_of(path.read_text(encoding="utf-8"), _module_name(path), path.name == "__init__.py")


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _sources(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


COMMAND_SOURCES = [p for p in _sources(COMMANDS) if p.name != "__init__.py"]
CORE_SOURCES = [p for p in _sources(MAM) if not p.is_relative_to(CLI) and not p.is_relative_to(COMMANDS)
                and p not in ENTRIES]
BACKEND_SOURCES = _sources(ROOT / "backends")


def _command_imports(path: Path) -> set[str]:
    own = _module_name(path)
    return {name for name in _imports(path)
            if name != "mam.commands" and _under(name, "mam.commands") and not _under(name, own)}


def test_the_layers_hold_enough_sources_to_mean_something() -> None:
    assert len(COMMAND_SOURCES) >= 8 and len(CORE_SOURCES) >= 30 and len(BACKEND_SOURCES) >= 6


@pytest.mark.parametrize("path", COMMAND_SOURCES, ids=lambda p: p.name)
def test_no_command_imports_another_command_or_the_cli(path: Path) -> None:
    imported = _imports(path)
    assert _command_imports(path) == set(), "shared code goes into a module below the commands (mam/<job>.py)"
    assert {name for name in imported if _under(name, "mam.cli")} == set()


def test_the_core_never_imports_a_command_or_the_cli() -> None:
    wrong = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if _under(n, "mam.commands")
                                              or _under(n, "mam.cli"))
             for p in CORE_SOURCES}
    assert {path: names for path, names in wrong.items() if names} == {}


def test_backends_import_only_mam_api() -> None:
    wrong = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if _under(n, "mam") and n != "mam"
                                              and not _under(n, "mam.api"))
             for p in BACKEND_SOURCES}
    assert {path: names for path, names in wrong.items() if names} == {}


def test_the_cli_framework_is_imported_only_inside_mam_cli() -> None:
    wrong = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n.split(".")[0] in CLI_FRAMEWORKS)
             for p in [*COMMAND_SOURCES, *CORE_SOURCES, *BACKEND_SOURCES]}
    assert {path: names for path, names in wrong.items() if names} == {}


def _is_top_view(path: Path) -> bool:
    """mam/top.py, mam/cli/top.py, a mam/top/ package: where `mam top` would live."""
    return path.is_relative_to(MAM) and any(part.startswith("top")
                                            for part in path.relative_to(MAM).with_suffix("").parts)


def test_textual_is_imported_only_by_the_top_view() -> None:
    everything = [*_sources(MAM), *BACKEND_SOURCES]
    wrong = {str(p.relative_to(ROOT)) for p in everything
             if not _is_top_view(p) and any(n.split(".")[0] == "textual" for n in _imports(p))}
    assert wrong == set()


def test_the_checks_see_every_form_of_import() -> None:
    """The rules above can fail: each form a command could import another by is seen."""
    sources = {
        "from mam.commands.restore import restore_document": {"mam.commands.restore"},
        "from mam.commands import restore": {"mam.commands.restore"},
        "def f():\n    import mam.commands.restore as r\n": {"mam.commands.restore"},
        "from . import restore": {"mam.commands.restore"},
        "from .restore import restore_document": {"mam.commands.restore"},
        "from ..agents.rows import rows_on": {"mam.agents.rows"},
        "import typer": {"typer"},
    }
    for source, expected in sources.items():
        assert expected <= imports_of(source, "mam.commands.lifecycle"), source
    assert "mam.commands.restore" not in imports_of("from mam.agents.restoreplan import run_plan",
                                                      "mam.commands.lifecycle")
