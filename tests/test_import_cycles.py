"""mam's modules import each other in one direction only: no circle, not even one closed by an import made only
for type checking (a module that needs its importer back has two jobs, or the job of a module below both).

Imports inside a function are left out: they defer a module until it is used (start-up cost), and are the way
a lower module reaches a higher one it builds on demand
(mam.calls.route.Route.batched builds a mam.calls.batch.Batch)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mam"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


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


def _imported(module: str, path: Path, everywhere: bool = False) -> set[str]:
    """The mam modules `module` imports at import time (or for type checking); `everywhere`: functions too."""
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
            for alias in node.names:  # `from mam import runner` imports the module mam.calls.runner
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {name for name in found if name in MODULES and name != module and name != "mam"}


GRAPH = {module: _imported(module, path) for module, path in MODULES.items()}


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
    # the scan sees the imports it must: a module-level one, a TYPE_CHECKING one and a `from mam import x` one
    assert "mam.calls.runner" in GRAPH["mam.calls.route"]
    assert "mam.calls.transport" in GRAPH["mam.calls.route"]
    assert "mam.calls.runner" in GRAPH["mam.calls.machine"]


def test_no_module_of_mam_imports_itself_back() -> None:
    circles = _circles(GRAPH)
    assert not circles, "import circles in mam/: " + "; ".join(" <-> ".join(c) for c in circles)


def test_the_circle_test_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_registry_checks_hosts_without_the_ssh_transport() -> None:
    imported = _imported("mam.registry.file", MODULES["mam.registry.file"], everywhere=True)
    assert "mam.util.names" in imported and "mam.calls.transport" not in imported


def test_the_runner_knows_neither_batches_nor_ssh() -> None:
    imported = _imported("mam.calls.runner", MODULES["mam.calls.runner"], everywhere=True)
    assert "mam.plugin.records" in imported
    assert not {"mam.calls.batch", "mam.calls.transport", "mam.calls.route"} & imported
