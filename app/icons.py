"""Icons drawn at run time with QPainter: the app mark and one tray icon per service state."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPen, QPixmap

from app.broker.state import ServiceState
from app.window.look import STATE_LOOKS

_SIZES = (16, 22, 24, 32, 48, 64, 128)
_BRAND = QColor("#3b6fd4")
# Three nodes of a small cluster, in a 1 x 1 box.
_NODES = (QPointF(0.5, 0.24), QPointF(0.24, 0.72), QPointF(0.76, 0.72))


def _draw_mark(painter: QPainter, size: int, fill: QColor) -> None:
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
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


def _icon(fill: QColor) -> QIcon:
    icon = QIcon()
    for size in _SIZES:
        pixmap = QPixmap(size, size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        try:
            _draw_mark(painter, size, fill)
        finally:
            painter.end()
        icon.addPixmap(pixmap)
    return icon


def app_icon() -> QIcon:
    """The PAIR mark in the brand colour."""
    return _icon(_BRAND)


def state_icon(state: ServiceState) -> QIcon:
    """The PAIR mark tinted with the state's colour (for the tray)."""
    if state is ServiceState.READY:
        return _icon(_BRAND)
    return _icon(STATE_LOOKS[state].colour)
