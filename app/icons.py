"""The app mark and one tray icon per service state, rendered from ``resources/icons/pair.svg``.

The tray's state icons are the same SVG with its brand fill swapped for the state's colour, so
every icon has the installers' look. Without the file (a wheel installed apart from the
checkout) or with one Qt cannot read, the same mark is drawn with QPainter instead.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QByteArray, QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPen, QPixmap
from PySide6.QtSvg import QSvgRenderer

from app.broker.state import ServiceState
from app.bundle import resource_path
from app.window.look import STATE_LOOKS

log = logging.getLogger(__name__)
APP_ICON_FILE = "icons/pair.svg"
# The mark's fill in the SVG; a state icon replaces it with the state's colour.
BRAND = "#3b6fd4"
_SIZES = (16, 22, 24, 32, 48, 64, 128, 256)
# Three nodes of a small cluster, in a 1 x 1 box (the fallback drawing of the SVG's mark).
_NODES = (QPointF(0.5, 0.24), QPointF(0.24, 0.72), QPointF(0.76, 0.72))


def app_icon(source: Path | None = None) -> QIcon:
    """The PAIR mark in the brand colour, from ``source`` (default: the bundled SVG)."""
    return _icon(BRAND, source)


def state_icon(state: ServiceState, source: Path | None = None) -> QIcon:
    """The PAIR mark tinted with the state's colour (for the tray); brand colour when ready."""
    fill = BRAND if state is ServiceState.READY else STATE_LOOKS[state].colour.name()
    return _icon(fill, source)


def svg_renderer(fill: str = BRAND, source: Path | None = None) -> QSvgRenderer | None:
    """A renderer of the mark with ``fill`` for its brand colour; None when the SVG is missing."""
    path = resource_path(APP_ICON_FILE) if source is None else source
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        log.info("app icon %s not readable (%s); drawing the mark instead", path, exc)
        return None
    renderer = QSvgRenderer(QByteArray(text.replace(BRAND, fill).encode()))
    return renderer if renderer.isValid() else None


def _icon(fill: str, source: Path | None) -> QIcon:
    renderer = svg_renderer(fill, source)
    icon = QIcon()
    for size in _SIZES:
        pixmap = QPixmap(size, size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        try:
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            if renderer is not None:
                renderer.render(painter, QRectF(0, 0, size, size))
            else:
                _draw_mark(painter, size, QColor(fill))
        finally:
            painter.end()
        icon.addPixmap(pixmap)
    return icon


def _draw_mark(painter: QPainter, size: int, fill: QColor) -> None:
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(fill)
    margin = size * 0.04
    painter.drawEllipse(QRectF(margin, margin, size - 2 * margin, size - 2 * margin))
    points = [QPointF(node.x() * size, node.y() * size) for node in _NODES]
    painter.setPen(QPen(QColor("white"), max(1.0, size * 0.07)))
    for index, point in enumerate(points):
        painter.drawLine(point, points[(index + 1) % len(points)])
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(QColor("white"))
    radius = size * 0.11
    for point in points:
        painter.drawEllipse(point, radius, radius)
