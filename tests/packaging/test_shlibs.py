"""The .deb's Depends and Recommends, derived by packaging/deb/shlibs.py from the ELF files of a
frozen folder (real Qt plugins, with stand-ins for the Qt libraries they link to)."""

from __future__ import annotations

import importlib
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

import PySide6
import pytest

DEB = Path(__file__).resolve().parents[2] / "packaging" / "deb"
QT = Path(PySide6.__file__).resolve().parent / "Qt"
XCB_PLUGIN = QT / "plugins" / "platforms" / "libqxcb.so"
GTK_PLUGIN = QT / "plugins" / "platformthemes" / "libqgtk3.so"

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not XCB_PLUGIN.is_file(), reason="reads Linux Qt plugins"
)


def _deb_module(name: str) -> ModuleType:
    """A script module of packaging/deb/ (a folder of scripts, not a package)."""
    if str(DEB) not in sys.path:
        sys.path.insert(0, str(DEB))
    return importlib.import_module(name)


shlibs = _deb_module("shlibs")


def _frozen_folder(root: Path) -> Path:
    """A folder shaped like PyInstaller's, with real plugins and stand-ins for bundled Qt."""
    internal = root / "_internal" / "PySide6" / "Qt"
    for plugin in (XCB_PLUGIN, GTK_PLUGIN):
        target = internal / plugin.relative_to(QT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plugin, target)
    (internal / "lib").mkdir()
    for bundled in ("libQt6XcbQpa.so.6", "libQt6Gui.so.6", "libQt6Core.so.6", "libQt6DBus.so.6"):
        (internal / "lib" / bundled).write_bytes(b"")  # bundled: found by name
    return root


@pytest.mark.skipif(not GTK_PLUGIN.is_file(), reason="this PySide6 has no GTK theme plugin")
def test_libraries_of_optional_plugins_are_only_recommended(tmp_path: Path) -> None:
    relations = shlibs.package_relations(_frozen_folder(tmp_path))
    names = [re.sub(r" \(.*\)$", "", package) for package in relations.depends]
    assert {"libxcb-cursor0", "libxkbcommon-x11-0", "libgl1", "libstdc++6"} <= set(names)
    assert any(re.fullmatch(r"libc6 \(>= 2\.\d+\)", package) for package in relations.depends)
    assert "libgtk-3-0" in relations.recommends
    assert "libgtk-3-0" not in names
    assert not set(relations.recommends) & set(names), "a required library is not also optional"
    assert names == sorted(names)
    assert not any(name.startswith("libqt6") for name in names), "bundled Qt is not a dependency"


def test_an_unknown_library_fails_the_build(tmp_path: Path) -> None:
    folder = _frozen_folder(tmp_path)
    (folder / "_internal" / "PySide6" / "Qt" / "lib" / "libQt6Core.so.6").unlink()
    with pytest.raises(shlibs.UnknownLibraryError, match=r"libQt6Core\.so\.6"):
        shlibs.package_relations(folder)


def test_a_folder_without_binaries_needs_nothing(tmp_path: Path) -> None:
    (tmp_path / "pair").write_text("#!/bin/sh\n")
    relations = shlibs.package_relations(tmp_path)
    assert relations == shlibs.PackageRelations(depends=(), recommends=())
