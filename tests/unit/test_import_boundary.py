"""The layout is the architecture: backend never imports Qt or app; app sees only protocol."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QT_MODULES = ("PySide6", "shiboken6", "qasync", "PyQt5", "PyQt6")


def _imports(package: str, root: Path = ROOT) -> Iterator[tuple[Path, str]]:
    for path in sorted((root / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield path, alias.name
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                yield path, node.module
                for alias in node.names:
                    yield path, f"{node.module}.{alias.name}"


def _violations(
    package: str, forbidden: tuple[str, ...], allowed: tuple[str, ...] = (), root: Path = ROOT
) -> list[str]:
    found = []
    for path, module in _imports(package, root):
        if module.startswith(allowed):
            continue
        if any(module == name or module.startswith(name + ".") for name in forbidden):
            found.append(f"{path.relative_to(root)} imports {module}")
    return found


def test_backend_never_imports_qt_or_the_app() -> None:
    assert _violations("backend", (*QT_MODULES, "app")) == []


def test_app_imports_only_the_protocol_package_from_backend() -> None:
    allowed = ("backend.protocol",)
    assert _violations("app", ("backend",), allowed) == []
    assert "backend" not in {module for _, module in _imports("app")}, "import backend is too wide"


def test_the_checker_sees_violations(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "bad.py").write_text(
        "from backend.core import supervisor\nimport backend.protocol.types\n"
    )
    (tmp_path / "backend").mkdir()
    (tmp_path / "backend" / "bad.py").write_text("if True:\n    from PySide6 import QtCore\n")
    app_found = _violations("app", ("backend",), ("backend.protocol",), root=tmp_path)
    assert app_found == [
        "app/bad.py imports backend.core",
        "app/bad.py imports backend.core.supervisor",
    ]
    assert _violations("backend", QT_MODULES, root=tmp_path) == [
        "backend/bad.py imports PySide6",
        "backend/bad.py imports PySide6.QtCore",
    ]
