"""No import loops: the modules of backend and app that import each other when loaded form no
cycle (imports under ``if TYPE_CHECKING:`` and inside functions run later, so they don't count
there); and no module reaches back to one that imports it even through such deferred imports,
since two modules that need each other are one module split in the wrong place."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLACES = ("backend", "app")


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _load_time_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is loaded: not in functions, not in
    ``if TYPE_CHECKING:`` (its ``else`` runs)."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _load_time_imports(node.orelse)
        else:
            # Class bodies, if/else, try, with and loops run when the module loads.
            for field in ("body", "orelse", "finalbody"):
                yield from _load_time_imports(getattr(node, field, []))
            for handler in getattr(node, "handlers", []):
                yield from _load_time_imports(handler.body)
            for case in getattr(node, "cases", []):
                yield from _load_time_imports(case.body)


def _resolve(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[str]:
    """The modules an import statement names (``from pkg import sub`` names ``pkg.sub``)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names)


def _every_import(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Import | ast.ImportFrom):
                yield node


def import_graph(root: Path = ROOT, *, deferred: bool = False) -> dict[str, set[str]]:
    """Each module of backend and app, and the modules of both that it imports when loaded
    (``deferred``: anywhere, in functions and ``if TYPE_CHECKING:`` as well)."""
    statements = _every_import if deferred else _load_time_imports
    paths = {
        _module_name(p, root): p for place in PLACES for p in sorted((root / place).rglob("*.py"))
    }
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        graph[module] = {
            name
            for node in statements(tree.body)
            for name in _resolve(node, module, is_package)
            if name in paths and name != module
        }
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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
    return sorted(found)


def test_backend_and_app_have_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_cycle_even_through_deferred_imports() -> None:
    found = cycles(import_graph(deferred=True))
    assert not found, "import cycles through deferred imports:\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_a_cycle_is_found_and_named(tmp_path: Path) -> None:
    package = tmp_path / "backend"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "first.py").write_text("from backend import second\n")
    (package / "second.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from backend import third\n"
        "from backend.first import x\n"
    )
    (package / "third.py").write_text(
        "import backend.first\n\ndef later() -> None:\n    from backend import second\n"
    )
    (tmp_path / "app").mkdir()

    assert cycles(import_graph(tmp_path)) == [["backend.first", "backend.second"]]
    assert cycles(import_graph(tmp_path, deferred=True)) == [
        ["backend.first", "backend.second", "backend.third"]
    ]
