"""The app icon as PNGs, rendered from ``resources/icons/pair.svg`` with Qt (no display needed).

``packaging/`` is a folder of build scripts, not an importable package: the name ``packaging``
belongs to the PyPI library that pip and pytest import. Scripts here import this module by
putting ``packaging/`` on ``sys.path`` (``import icons``).

Usage: ``python packaging/icons.py ROOT`` writes the hicolor theme under ``ROOT/usr/share/icons``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
from PySide6.QtGui import QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

SVG_PATH = Path(__file__).resolve().parent.parent / "resources" / "icons" / "pair.svg"
ICON_NAME = "pair"
# The sizes the freedesktop icon theme spec lists for apps, up to what HiDPI launchers ask for.
HICOLOR_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)


def render_png(size: int) -> bytes:
    """The icon as a ``size`` x ``size`` PNG with a transparent background."""
    if size <= 0:
        raise ValueError(f"icon size must be positive, not {size}")
    renderer = QSvgRenderer(str(SVG_PATH))
    if not renderer.isValid():
        raise RuntimeError(f"{SVG_PATH} is not an SVG Qt can render")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    try:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
    finally:
        painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    # PySide6's stubs type the format as bytes, but at run time it must be a str.
    if not image.save(buffer, "PNG"):  # type: ignore[call-overload]
        raise RuntimeError(f"Qt could not encode the {size} px icon as PNG")
    buffer.close()
    return bytes(data.data())


def write_hicolor(root: Path, sizes: Iterable[int] = HICOLOR_SIZES) -> list[Path]:
    """Write ``root/usr/share/icons/hicolor/NxN/apps/pair.png`` per size and the scalable SVG.

    Returns the files written. Files are 0644 and directories 0755 whatever the umask, since they
    go into a package as they are.
    """
    theme = root / "usr" / "share" / "icons" / "hicolor"
    written: list[Path] = []
    for size in sizes:
        path = theme / f"{size}x{size}" / "apps" / f"{ICON_NAME}.png"
        _write(path, render_png(size))
        written.append(path)
    scalable = theme / "scalable" / "apps" / f"{ICON_NAME}.svg"
    _write(scalable, SVG_PATH.read_bytes())
    written.append(scalable)
    return written


def _write(path: Path, contents: bytes) -> None:
    for directory in reversed(path.parents):
        if not directory.exists():
            directory.mkdir()
            directory.chmod(0o755)
    path.write_bytes(contents)
    path.chmod(0o644)


def main(argv: list[str] | None = None) -> int:
    """Write the hicolor icons under the root given on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("root", type=Path, help="the tree to write usr/share/icons/hicolor into")
    options = parser.parse_args(argv)
    for path in write_hicolor(options.root):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
