"""mam's modules import each other in one direction only: no circle of any kind. Every import counts: at module
level, under TYPE_CHECKING, and inside a function (a deferred import is still a dependency: it only comes later).
A module that needs its importer back has two jobs, or the job of a module below both: move the shared piece down,
pass it in, or split the module.

`from P import m` names P as well as P.m: P's __init__ runs first and hands over m, so a module of P that imports a
sibling so while P's __init__ imports it closes a circle through the package (import the sibling by its full name,
`import P.m as m`, or keep P's __init__ free of imports). The backends (backends/) are read the same way.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mam"
BACKENDS = ROOT / "backends"


def _module_name(path: Path) -> str:
    parts = path.relative_to(BACKENDS if path.is_relative_to(BACKENDS) else ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for root in (PACKAGE, BACKENDS) for path in root.rglob("*.py")
           if "__pycache__" not in path.parts}


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements run at import: the module's own, and those in its top-level if/try blocks (TYPE_CHECKING
    included); never a function's or a class's body."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _top_level(block)


def _imported(module: str, path: Path, everywhere: bool = True) -> set[str]:
    """The modules of mam (and of the backends) `module` imports anywhere in it; `everywhere=False`: only those
    imported when it is (its top level and top-level if/try blocks, TYPE_CHECKING included)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree) if everywhere else _top_level(tree.body):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)  # its __init__ runs, and hands over each name: a module of it, or a name it holds
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name in MODULES and name != module and name != "mam"}


GRAPH = {module: _imported(module, path) for module, path in MODULES.items()}
AT_IMPORT = {module: _imported(module, path, everywhere=False) for module, path in MODULES.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read() -> None:
    # the scan sees the imports it must: a module-level one, a TYPE_CHECKING one, a `from mam.calls import x` one
    assert "mam.calls.runner" in AT_IMPORT["mam.calls.route"]
    assert "mam.calls.transport" in AT_IMPORT["mam.calls.route"]
    assert "mam.calls.runner" in GRAPH["mam.calls.machine"]
    # ...one inside a function, which only the whole graph holds
    assert "mam.calls.batch" in GRAPH["mam.calls.route"] and "mam.calls.batch" not in AT_IMPORT["mam.calls.route"]
    # ...the package that `from mam.cli import complete` names, and the backends' own modules
    assert {"mam.cli", "mam.cli.complete"} <= GRAPH["mam.cli.main"]
    assert "mam_tmux.backend" in GRAPH["mam_tmux.plugin"] and "mam.api" in GRAPH["mam_tmux.plugin"]


def test_no_module_of_mam_imports_itself_back() -> None:
    circles = _circles(GRAPH)
    assert not circles, "import circles in mam/ or backends/: " + "; ".join(" <-> ".join(c) for c in circles)


def test_the_circle_test_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_registry_checks_hosts_without_the_ssh_transport() -> None:
    imported = GRAPH["mam.registry.file"]
    assert "mam.util.names" in imported and "mam.calls.transport" not in imported


def test_the_runner_knows_neither_batches_nor_ssh() -> None:
    imported = GRAPH["mam.calls.runner"]
    assert "mam.plugin.records" in imported
    assert not {"mam.calls.batch", "mam.calls.transport", "mam.calls.route"} & imported
