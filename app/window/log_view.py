"""A read-only, monospace view of recent log lines with a Refresh button."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QFontDatabase, QTextCursor
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from app.window.widgets import muted_label

MAX_LINES = 2000
VIEW_HEIGHT = 200


class LogView(QWidget):
    """Shows the lines it is given, newest at the bottom; ``refresh_requested`` asks for more.

    It never reads anything itself: whoever owns it answers ``refresh_requested`` with
    ``set_lines`` or ``set_error``.
    """

    refresh_requested = Signal()

    def __init__(self, title: str = "Log", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel(f"<b>{title}</b>")
        self.status = muted_label()
        self.status.setWordWrap(False)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Read the latest lines again")
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setMaximumBlockCount(MAX_LINES)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.setPlaceholderText("No output yet.")
        self.text.setMinimumHeight(VIEW_HEIGHT)
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.title)
        header.addWidget(self.status, 1)
        header.addWidget(self.refresh_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addLayout(header)
        layout.addWidget(self.text)
        self.refresh_button.clicked.connect(self._on_refresh_button_clicked)

    def set_loading(self) -> None:
        """A read is under way."""
        self.status.setText("Reading…")
        self.refresh_button.setEnabled(False)

    def set_lines(self, lines: list[str]) -> None:
        """Show ``lines`` (oldest first) and scroll to the newest."""
        self.text.setPlainText("\n".join(lines))
        # Newest line in view, long lines shown from their start.
        self.text.moveCursor(QTextCursor.MoveOperation.End)
        self.text.moveCursor(QTextCursor.MoveOperation.StartOfBlock)
        self.text.verticalScrollBar().setValue(self.text.verticalScrollBar().maximum())
        self.text.horizontalScrollBar().setValue(0)
        count = len(lines)
        self.status.setText(f"last {count} line{'s' if count != 1 else ''}" if count else "")
        self.refresh_button.setEnabled(True)

    def set_error(self, message: str) -> None:
        """The read failed: say why, keep what was shown."""
        self.status.setText(f"Could not read the log: {message}")
        self.status.setToolTip(message)
        self.refresh_button.setEnabled(True)

    def _on_refresh_button_clicked(self) -> None:
        self.set_loading()
        self.refresh_requested.emit()
