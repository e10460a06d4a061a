"""The layout is the architecture: backend never imports Qt or app; app sees only protocol and
the shared pieces in common; workers never import a broker component; the product never imports
the development package."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

from tests.support.child import run_python

ROOT = Path(__file__).resolve().parents[2]
QT_MODULES = ("PySide6", "shiboken6", "qasync", "PyQt5", "PyQt6")
NETWORK_MODULES = ("socket", "ssl", "http", "urllib", "aiohttp", "zeroconf", "asyncio.streams")
# The one module of common that builds TLS contexts, which the broker and the proxy worker share.
COMMON_TLS = "backend/common/tls.py"
COMPONENTS = "backend.components"
DEV_PACKAGE = "backend.devtools"
# Prints each broker component module and keyring module that starting the proxy worker loads.
LOADED_BY_THE_WORKER = textwrap.dedent(
    """
    import sys
    import backend.workers.proxy.__main__
    for name in sorted(sys.modules):
        if name.split(".")[0] == "keyring" or name.split(".")[:2] == ["backend", "components"]:
            print(name)
    """
)
# The product: what runs in a user's broker, its components and workers.
PRODUCT = (
    "backend/core",
    "backend/components",
    "backend/workers",
    "backend/broker.py",
    "backend/wiring.py",
    "backend/common",
    "backend/protocol",
)


def _files(place: str, root: Path) -> list[Path]:
    target = root / place
    return [target] if target.is_file() else sorted(target.rglob("*.py"))


def _imports(
    place: str, root: Path = ROOT, *, top_level: bool = False
) -> Iterator[tuple[Path, str]]:
    for path in _files(place, root):
        tree = ast.parse(path.read_text(), filename=str(path))
        nodes = tree.body if top_level else ast.walk(tree)
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield path, alias.name
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                yield path, node.module
                for alias in node.names:
                    yield path, f"{node.module}.{alias.name}"


def _violations(
    place: str,
    forbidden: tuple[str, ...],
    allowed: tuple[str, ...] = (),
    root: Path = ROOT,
    *,
    top_level: bool = False,
) -> list[str]:
    found = []
    for path, module in _imports(place, root, top_level=top_level):
        if any(module == name or module.startswith(name + ".") for name in allowed):
            continue
        if any(module == name or module.startswith(name + ".") for name in forbidden):
            found.append(f"{path.relative_to(root)} imports {module}")
    return found


def test_backend_never_imports_qt_or_the_app() -> None:
    assert _violations("backend", (*QT_MODULES, "app")) == []


def test_app_imports_only_the_protocol_and_common_packages_from_backend() -> None:
    allowed = ("backend.protocol", "backend.common")
    assert _violations("app", ("backend",), allowed) == []
    assert "backend" not in {module for _, module in _imports("app")}, "import backend is too wide"


def test_common_imports_no_qt_no_app_no_network_and_only_the_protocol_from_backend() -> None:
    forbidden = (*QT_MODULES, "app", "backend", *NETWORK_MODULES)
    allowed = ("backend.common", "backend.protocol")
    for path in _files("backend/common", ROOT):
        place = path.relative_to(ROOT).as_posix()
        # Building a TLS context needs ssl, and the broker and the proxy worker need the same
        # contexts: ssl is allowed in that one module, and no other network module even there.
        extra = ("ssl",) if place == COMMON_TLS else ()
        assert _violations(place, forbidden, (*allowed, *extra)) == [], place


def test_workers_import_no_broker_component() -> None:
    assert _violations("backend/workers", (COMPONENTS,)) == []


def test_the_proxy_worker_loads_no_broker_component_and_no_keyring() -> None:
    # A fresh interpreter: the test process itself loaded the components long ago.
    assert run_python(LOADED_BY_THE_WORKER).stdout.split() == []


def test_the_product_never_imports_the_development_package() -> None:
    for place in PRODUCT:
        assert _violations(place, (DEV_PACKAGE,)) == [], place


def test_the_cli_imports_the_development_package_only_when_a_dev_command_runs() -> None:
    assert _violations("backend/cli", (DEV_PACKAGE,), top_level=True) == []


def test_the_checker_sees_violations(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "bad.py").write_text(
        "from backend.core import supervisor\nimport backend.protocol.types\n"
        "from backend.common.tasks import TaskSet\n"
    )
    (tmp_path / "backend" / "common").mkdir(parents=True)
    (tmp_path / "backend" / "bad.py").write_text("if True:\n    from PySide6 import QtCore\n")
    (tmp_path / "backend" / "common" / "net.py").write_text("import socket\nimport backend.core\n")
    (tmp_path / "backend" / "cli.py").write_text(
        "import backend.devtools.demo\n\ndef run():\n    from backend.devtools import testworker\n"
    )
    app_found = _violations("app", ("backend",), ("backend.protocol", "backend.common"), tmp_path)
    assert app_found == [
        "app/bad.py imports backend.core",
        "app/bad.py imports backend.core.supervisor",
    ]
    assert _violations("backend", QT_MODULES, root=tmp_path) == [
        "backend/bad.py imports PySide6",
        "backend/bad.py imports PySide6.QtCore",
    ]
    common = _violations("backend/common", ("backend", "socket"), ("backend.common",), tmp_path)
    assert common == [
        "backend/common/net.py imports socket",
        "backend/common/net.py imports backend.core",
    ]
    lazy = _violations("backend/cli.py", (DEV_PACKAGE,), root=tmp_path, top_level=True)
    assert lazy == ["backend/cli.py imports backend.devtools.demo"]
    assert len(_violations("backend/cli.py", (DEV_PACKAGE,), root=tmp_path)) == 3
