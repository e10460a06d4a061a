"""ELF files read by packaging/deb/elf.py (real Qt plugins, checked against ``readelf`` where it is
installed) and build-machine search paths rewritten in place."""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import PySide6
import pytest

DEB = Path(__file__).resolve().parents[2] / "packaging" / "deb"
QT = Path(PySide6.__file__).resolve().parent / "Qt"
XCB_PLUGIN = QT / "plugins" / "platforms" / "libqxcb.so"
PLUGIN_RUNPATH = b"$ORIGIN/../../lib\0"

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not XCB_PLUGIN.is_file(), reason="reads Linux Qt plugins"
)


def _deb_module(name: str) -> ModuleType:
    """A script module of packaging/deb/ (a folder of scripts, not a package)."""
    if str(DEB) not in sys.path:
        sys.path.insert(0, str(DEB))
    return importlib.import_module(name)


elf = _deb_module("elf")


def test_a_qt_plugin_needs_qt_and_the_xcb_libraries() -> None:
    links = elf.read_elf_links(XCB_PLUGIN)
    assert links.soname is None
    needed = set(links.needed)
    assert {"libQt6XcbQpa.so.6", "libxcb-cursor.so.0", "libxkbcommon-x11.so.0"} <= needed
    assert links.glibc is not None and links.glibc >= (2, 2)
    assert links.search_paths == ("$ORIGIN/../../lib",)


def test_a_library_names_itself() -> None:
    links = elf.read_elf_links(QT / "lib" / "libQt6Core.so.6")
    assert links.soname == "libQt6Core.so.6"


def _readelf(*argv: str) -> str:
    return subprocess.run(
        ["readelf", "--wide", *argv], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf (binutils) is not installed")
@pytest.mark.parametrize("path", [XCB_PLUGIN, QT / "lib" / "libQt6Gui.so.6", Path(sys.executable)])
def test_needed_libraries_and_glibc_match_readelf(path: Path) -> None:
    path = path.resolve()
    dynamic = _readelf("--dynamic", str(path))
    versions = _readelf("--version-info", str(path))
    glibc = [tuple(map(int, found)) for found in re.findall(r"GLIBC_(\d+)\.(\d+)", versions)]
    links = elf.read_elf_links(path)
    assert list(links.needed) == re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)
    assert links.glibc == (max(glibc) if glibc else None)
    paths = re.findall(r"\((?:RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[(.*?)\]", dynamic)
    assert list(links.search_paths) == paths


def test_other_files_are_not_elf(tmp_path: Path) -> None:
    script = tmp_path / "pair"
    script.write_text("#!/bin/sh\n")
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert elf.read_elf_links(script) is None
    assert elf.read_elf_links(empty) is None
    assert not elf.rewrite_foreign_search_paths(script)


@pytest.mark.parametrize(
    ("search_path", "foreign"),
    [
        ("$ORIGIN", False),
        ("$ORIGIN/../lib:${ORIGIN}/Qt/lib", False),
        ("/root/.pyenv/versions/3.11.7/lib", True),
        ("$ORIGIN:/opt/build/lib", True),
        ("relative/lib", True),
    ],
)
def test_only_origin_relative_search_paths_stay_inside_the_app(
    search_path: str, foreign: bool
) -> None:
    assert elf.is_foreign(search_path) is foreign


def _plugin_with_runpath(tmp_path: Path, runpath: bytes) -> Path:
    """A copy of a Qt plugin whose RUNPATH string is overwritten with ``runpath``."""
    data = XCB_PLUGIN.read_bytes()
    assert data.count(PLUGIN_RUNPATH) == 1
    copy = tmp_path / "libqxcb.so"
    copy.write_bytes(data.replace(PLUGIN_RUNPATH, runpath.ljust(len(PLUGIN_RUNPATH), b"\0")))
    return copy


def test_a_build_machine_runpath_becomes_origin_in_place(tmp_path: Path) -> None:
    plugin = _plugin_with_runpath(tmp_path, b"/home/ci/py/lib")
    assert elf.read_elf_links(plugin).search_paths == ("/home/ci/py/lib",)
    assert elf.rewrite_foreign_search_paths(plugin)
    links = elf.read_elf_links(plugin)
    assert links.search_paths == ("$ORIGIN",)
    assert links.needed == elf.read_elf_links(XCB_PLUGIN).needed, "nothing else changed"
    assert plugin.stat().st_size == XCB_PLUGIN.stat().st_size
    assert not elf.rewrite_foreign_search_paths(plugin), "a second pass has nothing to do"


def test_an_app_relative_runpath_is_left_alone(tmp_path: Path) -> None:
    plugin = tmp_path / "libqxcb.so"
    shutil.copyfile(XCB_PLUGIN, plugin)
    assert not elf.rewrite_foreign_search_paths(plugin)
    assert plugin.read_bytes() == XCB_PLUGIN.read_bytes()


def test_a_path_too_short_for_origin_is_refused(tmp_path: Path) -> None:
    plugin = _plugin_with_runpath(tmp_path, b"/lib")
    with pytest.raises(ValueError, match="cannot be rewritten"):
        elf.rewrite_foreign_search_paths(plugin)
