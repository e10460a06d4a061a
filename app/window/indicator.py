"""A small coloured dot that shows a service state."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.broker.state import ServiceState
from app.window.look import STATE_LOOKS


class StateDot(QWidget):
    """A filled circle in the colour of a ``ServiceState``."""

    def __init__(self, diameter: int = 12, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._diameter = diameter
        self._colour = QColor(STATE_LOOKS[ServiceState.CONNECTING].colour)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)

    def set_state(self, state: ServiceState) -> None:
        """Show ``state``'s colour."""
        self._colour = STATE_LOOKS[state].colour
        self.setToolTip(STATE_LOOKS[state].label)
        self.update()

    @property
    def colour(self) -> QColor:
        """The colour shown."""
        return self._colour

    def sizeHint(self) -> QSize:
        """Exactly the dot."""
        return QSize(self._diameter, self._diameter)

    def paintEvent(self, event: QPaintEvent) -> None:
        """Draw the dot centred in the widget."""
        painter = QPainter(self)
        try:
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(self._colour)
            side = min(self.width(), self.height()) - 1
            left = (self.width() - side) / 2
            top = (self.height() - side) / 2
            painter.drawEllipse(QRectF(left, top, side, side))
        finally:
            painter.end()
