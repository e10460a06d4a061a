"""The playground's right-hand side: the streamed answer, its figures or error, and the same
request as a ``curl`` command and a Python program, each with a copy button."""

from __future__ import annotations

from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.controllers.playground import result_lines
from app.controllers.playground_snippets import curl_command, python_program
from app.controllers.playground_stream import ChatResult
from app.controllers.playground_wire import ChatRequest
from app.window.look import State
from app.window.widgets import copy_to_clipboard, fixed_font, muted_label, tint

SNIPPET_LINES = 9


class AnswerBox(QGroupBox):
    """The answer as it streams in, then who served it and how fast, or the error."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Answer", parent)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setPlaceholderText("The answer appears here as the model writes it.")
        self.figures = muted_label("")
        self.error = QLabel("")
        self.error.setWordWrap(True)
        tint(self.error, State.ERROR)
        # Both lines keep their height while empty: the answer does not jump when they fill.
        line = self.figures.fontMetrics().height()
        self.figures.setMinimumHeight(line)
        self.error.setMinimumHeight(line)
        layout = QVBoxLayout(self)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.figures)
        layout.addWidget(self.error)

    def started(self) -> None:
        """A new request went out: clear the last answer."""
        self.text.clear()
        self.figures.setText("Waiting for the first token…")
        self.error.setText("")

    def append(self, text: str) -> None:
        """Add streamed text at the end (wherever the user's cursor is)."""
        cursor = self.text.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text)
        self.text.ensureCursorVisible()

    def ended(self, result: ChatResult, served_by: str) -> None:
        """Show the figures, and the error or that it was stopped."""
        lines = result_lines(result, served_by)
        self.figures.setText(" · ".join(lines) if lines else "")
        if result.cancelled:
            self.error.setText("Stopped.")
        else:
            self.error.setText(result.error or "")


class SnippetBox(QGroupBox):
    """The request as a ``curl`` command and a Python program, read-only, with copy buttons."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("The same request in code", parent)
        self.curl = _code_view()
        self.python = _code_view()
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.curl, "curl")
        self.tabs.addTab(self.python, "Python")
        bar = self.tabs.tabBar().sizeHint().height()
        self.tabs.setMaximumHeight(bar + self.curl.maximumHeight() + 4)
        self.copy_curl_button = QPushButton("Copy as curl")
        self.copy_python_button = QPushButton("Copy as Python")
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.copy_curl_button)
        buttons.addWidget(self.copy_python_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        layout.addLayout(buttons)
        # As tall as its code; the answer above takes the spare height.
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self.copy_curl_button.clicked.connect(self._on_copy_curl_button_clicked)
        self.copy_python_button.clicked.connect(self._on_copy_python_button_clicked)
        self.show_request(None)

    def show_request(self, request: ChatRequest | None) -> None:
        """Show ``request`` as code (None: nothing to send yet)."""
        self.curl.setPlainText(curl_command(request) if request is not None else "")
        self.python.setPlainText(python_program(request) if request is not None else "")
        for button in (self.copy_curl_button, self.copy_python_button):
            button.setEnabled(request is not None)

    def _on_copy_curl_button_clicked(self) -> None:
        copy_to_clipboard(self.curl.toPlainText(), self.copy_curl_button)

    def _on_copy_python_button_clicked(self) -> None:
        copy_to_clipboard(self.python.toPlainText(), self.copy_python_button)


def _code_view() -> QPlainTextEdit:
    view = QPlainTextEdit()
    view.setReadOnly(True)
    view.setFont(fixed_font())
    view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
    view.setPlaceholderText("Pick a model to see the request.")
    view.setFixedHeight(view.fontMetrics().lineSpacing() * SNIPPET_LINES + 12)
    return view


def empty_note() -> QLabel:
    """What the page says while the cluster has no model."""
    return muted_label("No model in the cluster yet: pull one on the Models page.")
