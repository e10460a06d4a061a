"""The app icon rendered from resources/icons/pair.svg by packaging/icons.py."""

from __future__ import annotations

import importlib
import stat
import sys
from pathlib import Path
from types import ModuleType

import pytest
from PySide6.QtGui import QImage

PACKAGING = Path(__file__).resolve().parents[2] / "packaging"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _packaging_module(name: str) -> ModuleType:
    """A script module of packaging/ (a folder of scripts: ``packaging`` is pip's library)."""
    if str(PACKAGING) not in sys.path:
        sys.path.insert(0, str(PACKAGING))
    return importlib.import_module(name)


icons = _packaging_module("icons")


def _image(blob: bytes) -> QImage:
    assert blob.startswith(PNG_SIGNATURE)
    image = QImage.fromData(blob)
    assert not image.isNull()
    return image


@pytest.mark.parametrize("size", [16, 22, 48, 256, 512])
def test_each_size_is_a_png_of_that_size(size: int) -> None:
    image = _image(icons.render_png(size))
    assert (image.width(), image.height()) == (size, size)
    assert image.hasAlphaChannel()


def test_the_background_is_transparent_and_the_mark_opaque() -> None:
    image = _image(icons.render_png(128))
    for corner in [(0, 0), (127, 0), (0, 127), (127, 127)]:
        assert image.pixelColor(*corner).alpha() == 0, corner
    # The circle's blue between the centre and the top node, and a white node.
    assert image.pixelColor(64, 60).name() == "#3b6fd4"
    assert image.pixelColor(64, 31).name() == "#ffffff"
    assert image.pixelColor(64, 64).alpha() == 255


def test_rendering_is_deterministic() -> None:
    assert icons.render_png(32) == icons.render_png(32)


@pytest.mark.parametrize("size", [0, -16])
def test_sizes_must_be_positive(size: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        icons.render_png(size)


def test_hicolor_theme_has_every_size_and_the_svg(tmp_path: Path) -> None:
    written = icons.write_hicolor(tmp_path, sizes=(16, 64))
    theme = tmp_path / "usr" / "share" / "icons" / "hicolor"
    assert written == [
        theme / "16x16" / "apps" / "pair.png",
        theme / "64x64" / "apps" / "pair.png",
        theme / "scalable" / "apps" / "pair.svg",
    ]
    assert _image(written[1].read_bytes()).width() == 64
    assert written[2].read_bytes() == icons.SVG_PATH.read_bytes()
    for path in written:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755


def test_the_default_sizes_are_the_hicolor_ones(tmp_path: Path) -> None:
    icons.write_hicolor(tmp_path)
    apps = sorted((tmp_path / "usr/share/icons/hicolor").glob("*/apps/pair.*"))
    names = {path.parent.parent.name for path in apps}
    assert names == {f"{size}x{size}" for size in icons.HICOLOR_SIZES} | {"scalable"}
    assert icons.HICOLOR_SIZES == (16, 22, 24, 32, 48, 64, 128, 256, 512)
