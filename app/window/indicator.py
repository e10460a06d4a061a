"""A small coloured dot that shows a service state."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.broker.state import ServiceState
from app.window.look import STATE_LOOKS


class ColourDot(QWidget):
    """A small filled circle in any colour."""

    def __init__(self, diameter: int = 10, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._diameter = diameter
        self._colour = QColor("#808080")
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)

    @property
    def colour(self) -> QColor:
        """The colour shown."""
        return self._colour

    def set_colour(self, colour: QColor) -> None:
        """Show ``colour``."""
        self._colour = QColor(colour)
        self.update()

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


class StateDot(ColourDot):
    """A filled circle in the colour of a ``ServiceState``."""

    def __init__(self, diameter: int = 12, parent: QWidget | None = None) -> None:
        super().__init__(diameter, parent)
        self.set_colour(QColor(STATE_LOOKS[ServiceState.CONNECTING].colour))

    def set_state(self, state: ServiceState) -> None:
        """Show ``state``'s colour."""
        self.set_colour(QColor(STATE_LOOKS[state].colour))
        self.setToolTip(STATE_LOOKS[state].label)
