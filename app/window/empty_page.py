"""A page that is not built yet: a title and a friendly empty-state message."""

from __future__ import annotations

from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.window.widgets import EmptyState, page_layout, page_title


class EmptyPage(QWidget):
    """A titled page whose body explains, centred, what will appear here."""

    def __init__(
        self, title: str, headline: str, message: str, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        layout = page_layout(QVBoxLayout(self))
        layout.addWidget(page_title(title))
        self.empty_state = EmptyState()
        self.empty_state.show_text(headline, message)
        self.headline = self.empty_state.headline
        self.message = self.empty_state.message
        layout.addWidget(self.empty_state, 1)
