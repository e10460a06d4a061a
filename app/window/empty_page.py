"""A page that is not built yet: a title and a friendly empty-state message."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.window.widgets import muted_label, page_title


class EmptyPage(QWidget):
    """A titled page whose body explains, centred, what will appear here."""

    def __init__(
        self, title: str, headline: str, message: str, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 20, 24, 24)
        layout.addWidget(page_title(title))
        layout.addStretch(1)
        self.headline = QLabel(headline)
        self.headline.setAlignment(Qt.AlignmentFlag.AlignCenter)
        font = self.headline.font()
        font.setPointSizeF(font.pointSizeF() * 1.25)
        font.setBold(True)
        self.headline.setFont(font)
        self.message = muted_label(message)
        self.message.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(self.headline)
        layout.addSpacing(6)
        layout.addWidget(self.message)
        layout.addStretch(2)
