"""Small painted gauges for the node cards: a sparkline of recent values and a usage bar."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.window.look import Shade
from app.window.theme import is_dark

WINDOW_SECONDS = 300.0  # the time span a sparkline shows, ending at its newest point
GAP_SECONDS = 10.0  # points further apart than this are not joined (the node was silent)
# A fill under the line, as opaque as reads on the background: a dark one needs more.
FILL_ALPHA = {False: 45, True: 70}

Point = tuple[float, float | None]  # (Unix time, value); None: not measured


def segments(points: Sequence[Point], gap: float = GAP_SECONDS) -> list[list[tuple[float, float]]]:
    """Split a series into runs to draw as lines: a missing value or a long silence breaks it."""
    runs: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    previous_at: float | None = None
    for at, value in points:
        if value is None or (previous_at is not None and at - previous_at > gap):
            if current:
                runs.append(current)
            current = []
        if value is not None:
            current.append((at, value))
        previous_at = at
    if current:
        runs.append(current)
    return runs


class Sparkline(QWidget):
    """The last ``WINDOW_SECONDS`` of a 0-``maximum`` series as a line over a faint fill, in
    ``shade``'s light or dark colour as the palette is."""

    def __init__(self, shade: Shade, maximum: float = 100.0, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._shade = shade
        self._maximum = maximum
        self._points: tuple[Point, ...] = ()
        self._muted = False
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_points(self, points: Sequence[Point], *, muted: bool = False) -> None:
        """Show ``points`` (oldest first); ``muted`` greys the line (the node is offline)."""
        points = tuple(points)
        if points == self._points and muted == self._muted:
            return
        self._points = points
        self._muted = muted
        self.update()

    @property
    def points(self) -> tuple[Point, ...]:
        """The series shown."""
        return self._points

    def sizeHint(self) -> QSize:
        """Wide and short."""
        return QSize(120, 34)

    def minimumSizeHint(self) -> QSize:
        """Narrower still reads."""
        return QSize(48, 34)

    def paintEvent(self, event: QPaintEvent) -> None:
        """Draw a baseline and the series scaled into the widget."""
        painter = QPainter(self)
        try:
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            area = QRectF(self.rect()).adjusted(1.0, 2.0, -1.0, -1.5)
            baseline = QColor(self.palette().color(QPalette.ColorRole.PlaceholderText))
            baseline.setAlpha(90)
            painter.setPen(QPen(baseline, 1.0))
            painter.drawLine(
                QPointF(area.left(), area.bottom()), QPointF(area.right(), area.bottom())
            )
            colour = self._line_colour()
            for run in segments(self._points):
                self._draw_run(painter, area, [self._place(area, at, v) for at, v in run], colour)
        finally:
            painter.end()

    def _line_colour(self) -> QColor:
        if self._muted:
            return QColor(self.palette().color(QPalette.ColorRole.PlaceholderText))
        return self._shade.pick(is_dark(self.palette()))

    def _place(self, area: QRectF, at: float, value: float) -> QPointF:
        end = self._points[-1][0]
        x = area.right() - (end - at) / WINDOW_SECONDS * area.width()
        share = min(max(value / self._maximum, 0.0), 1.0)
        return QPointF(max(x, area.left()), area.bottom() - share * area.height())

    def _draw_run(
        self, painter: QPainter, area: QRectF, placed: list[QPointF], colour: QColor
    ) -> None:
        placed = [point for point in placed if point.x() >= area.left()]
        if not placed:
            return
        if len(placed) == 1:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(colour)
            painter.drawEllipse(placed[0], 2.0, 2.0)
            return
        line = QPainterPath(placed[0])
        for point in placed[1:]:
            line.lineTo(point)
        fill = QPainterPath(line)
        fill.lineTo(placed[-1].x(), area.bottom())
        fill.lineTo(placed[0].x(), area.bottom())
        fill.closeSubpath()
        shade = QColor(colour)
        shade.setAlpha(FILL_ALPHA[is_dark(self.palette())])
        painter.fillPath(fill, shade)
        painter.setPen(QPen(colour, 1.6))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawPath(line)


class UsageBar(QWidget):
    """A thin horizontal bar filled to ``fraction`` (0-1) in ``shade``; empty when unknown."""

    def __init__(self, shade: Shade, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._shade = shade
        self._fraction: float | None = None
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_fraction(self, fraction: float | None) -> None:
        """Fill to ``fraction`` (clamped), or show only the track when None."""
        if fraction is not None:
            fraction = min(max(fraction, 0.0), 1.0)
        if fraction != self._fraction:
            self._fraction = fraction
            self.update()

    @property
    def fraction(self) -> float | None:
        """The share shown."""
        return self._fraction

    def sizeHint(self) -> QSize:
        """Thin."""
        return QSize(80, 6)

    def paintEvent(self, event: QPaintEvent) -> None:
        """Draw the track and the filled share, both rounded."""
        painter = QPainter(self)
        try:
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            painter.setPen(Qt.PenStyle.NoPen)
            track = QColor(self.palette().color(QPalette.ColorRole.PlaceholderText))
            track.setAlpha(60)
            rect = QRectF(self.rect())
            radius = rect.height() / 2
            painter.setBrush(track)
            painter.drawRoundedRect(rect, radius, radius)
            if self._fraction:
                painter.setBrush(self._shade.pick(is_dark(self.palette())))
                filled = QRectF(
                    rect.left(), rect.top(), rect.width() * self._fraction, rect.height()
                )
                painter.drawRoundedRect(filled, radius, radius)
        finally:
            painter.end()
