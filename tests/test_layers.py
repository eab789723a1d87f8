"""mam's layers, from the imports its sources write (every import, a deferred one inside a function too).

LAYERS below is the order, from the face down to the small helpers: a module may import its own package and the
packages of the tiers below its own; never one above, nor another package of its own tier. Besides:
- the commands (mam/commands/): each one a command, none importing another (shared code lives below them);
- the backends (backends/) import mam.api only;
- the CLI framework (typer, click) only in mam/cli/, Textual only in the `mam top` view.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAM = ROOT / "mam"
CLI = MAM / "cli"
COMMANDS = MAM / "commands"
ENTRIES = (MAM / "__main__.py", MAM / "entry.py")  # `python3 -m mam` and the `mam` script: they run the CLI
CLI_FRAMEWORKS = {"typer", "click"}

# The order, once: each tier a tuple of packages, from the face down. Each package's __init__.py says its job.
LAYERS: list[tuple[str, ...]] = [
    ("mam.cli", "mam.api", "mam.testing"),  # the faces: the command line; the plugins' API and their test kit
    ("mam.web",),  # `mam serve`: the fleet over HTTP (loaded by that command alone)
    ("mam.live",),  # the live model of `mam top`, `mam watch` and `mam serve`: poller, changes, actions
    ("mam.commands",),  # one module per command
    ("mam.agents",),  # the jobs on agents: state, rows, status, launch, restore, peek
    ("mam.servers", "mam.hooks"),  # the jobs on servers and a command's context; the agents' own hooks
    ("mam.calls",),  # how a backend's calls travel: here, or to another host over ssh
    ("mam.plugin", "mam.config", "mam.kinds"),  # the plugin machinery; workspace and settings; agent kinds
    ("mam.registry", "mam.audit"),  # the registry of agent sessions; the audit trail
    ("mam.util",),  # small helpers
]
# mam/'s own top-level modules: the `mam` script's entry point and `python -m mam` run the CLI; the root package
# (mam.__version__, mam.hookimpl for plugin authors) is a face, and any module may import it (its parent).
TOP_LEVEL = {"mam.entry": "mam.cli", "mam.__main__": "mam.cli", "mam": "mam.api"}


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
# The core: all but the faces (cli, web), the live model above the commands, the commands and the entry points.
CORE_SOURCES = [p for p in _sources(MAM) if not any(p.is_relative_to(MAM / f) for f in ("cli", "web", "live"))
                and not p.is_relative_to(COMMANDS) and p not in ENTRIES]
BACKEND_SOURCES = _sources(ROOT / "backends")


MODULES = {_module_name(p) for p in _sources(MAM)}


def layer_of(module: str) -> tuple[int, str] | None:
    """(tier, package) of a module of mam, None when it is in no layer."""
    module = TOP_LEVEL.get(module, module)
    for tier, packages in enumerate(LAYERS):
        for package in packages:
            if _under(module, package):
                return tier, package
    return None


def _module_named(name: str) -> str | None:
    """The module an imported name is or is in (`mam.util.errors.MamError`: mam.util.errors)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def breaches(module: str, imported: set[str]) -> list[str]:
    """The imports of `module` that go up the layers or sideways (to another package of its own tier)."""
    own = layer_of(module)
    found = []
    for name in sorted(imported):
        target = _module_named(name) if _under(name, "mam") else None
        if target is None or target == "mam":
            continue  # not mam's, or the root package (every module's parent)
        other = layer_of(target)
        if own is None or other is None:
            found.append(f"{target} (in no layer)")
        elif other[1] != own[1] and other[0] <= own[0]:
            found.append(f"{target} ({'sideways' if other[0] == own[0] else 'up'}: {other[1]})")
    return found


def _command_imports(path: Path) -> set[str]:
    own = _module_name(path)
    return {name for name in _imports(path)
            if name != "mam.commands" and _under(name, "mam.commands") and not _under(name, own)}


def test_the_layers_hold_enough_sources_to_mean_something() -> None:
    assert len(COMMAND_SOURCES) >= 8 and len(CORE_SOURCES) >= 30 and len(BACKEND_SOURCES) >= 6


def test_every_module_of_mam_is_in_a_layer() -> None:
    assert {module for module in MODULES if layer_of(module) is None} == set()
    assert {p.name for p in MAM.glob("*.py")} == {"__init__.py", "__main__.py", "entry.py", "api.py"}


def test_no_import_goes_up_the_layers_or_sideways() -> None:
    wrong = {str(p.relative_to(ROOT)): breaches(_module_name(p), _imports(p)) for p in _sources(MAM)}
    assert {path: names for path, names in wrong.items() if names} == {}


def test_each_layer_says_its_job_and_what_it_may_import() -> None:
    for packages in LAYERS:
        for package in packages:
            init = ROOT.joinpath(*package.split("."), "__init__.py")
            source = init if init.exists() else ROOT.joinpath(*package.split(".")).with_suffix(".py")
            doc = ast.get_docstring(ast.parse(source.read_text(encoding="utf-8"))) or ""
            said = re.search(r"[Mm]ay import|[Ii]mports nothing", doc)
            assert said, f"{source.relative_to(ROOT)}: its docstring says what the layer may import"


def deferred_without_a_reason(source: str) -> list[int]:
    """The lines of imports of mam (or of a backend's own modules) inside a function that say not why: neither a
    comment on the line or the one above, nor the module's `# Deferred imports ...` line. A deferred import is
    for start-up only (typer, Textual, a backend's working module, the core a command runs)."""
    if re.search(r"^# Deferred imports", source, re.MULTILINE):
        return []
    lines = source.splitlines()
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] in ("mam", "mam_herdr", "mam_tmux", "mam_zellij") for n in names) and not (
                    "#" in lines[node.lineno - 1] or lines[node.lineno - 2].strip().startswith("#")):
                found.append(node.lineno)
    return sorted(set(found))


def test_every_deferred_import_says_why() -> None:
    wrong = {str(p.relative_to(ROOT)): deferred_without_a_reason(p.read_text(encoding="utf-8"))
             for p in [*_sources(MAM), *BACKEND_SOURCES]}
    assert {path: lines for path, lines in wrong.items() if lines} == {}
    assert deferred_without_a_reason("def f():\n    from mam.calls import runner\n") == [2]
    assert deferred_without_a_reason("def f():\n    from mam.calls import runner  # start-up\n") == []


def test_the_layer_check_sees_a_breach() -> None:
    """The order can fail: up, sideways, inside a function, by any name; and down is fine."""
    assert breaches("mam.util.render", imports_of("from mam.agents.rows import rows_on", "mam.util.render"))
    assert breaches("mam.servers.app", imports_of("def f():\n    from mam.hooks import report\n", "mam.servers.app"))
    assert breaches("mam.calls.runner", imports_of("import mam.servers.app as app", "mam.calls.runner"))
    assert breaches("mam.entry", imports_of("from mam import api", "mam.entry"))  # the CLI beside the API
    assert breaches("mam.commands.forget", imports_of("from mam.live import changes", "mam.commands.forget"))
    assert breaches("mam.agents.rows", imports_of("from mam.util import errors\nfrom mam.calls import route\n"
                                                  "from mam.agents import remains\nfrom mam import __version__",
                                                  "mam.agents.rows")) == []


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


WEB_FRAMEWORKS = ("starlette", "uvicorn", "prometheus_client", "h11", "anyio", "httpx")


def test_the_web_framework_is_imported_only_inside_mam_web() -> None:
    """Starlette, uvicorn and the metrics library belong to `mam serve` (mam/web/) alone: its command names the
    app inside a function, so no other command loads them, nor fails where mam[web] is not installed."""
    web = MAM / "web"
    everything = [*_sources(MAM), *BACKEND_SOURCES]
    wrong = {str(p.relative_to(ROOT)) for p in everything
             if not p.is_relative_to(web) and any(n.split(".")[0] in WEB_FRAMEWORKS for n in _imports(p))}
    assert wrong == set()
    assert any(n.split(".")[0] == "starlette" for n in _imports(web / "routes.py"))  # the check sees them


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
