"""The API endpoints window: each front door's real URL with a Copy button, a note when its
port had to move, and an example request."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, QTimer
from PySide6.QtGui import QFontDatabase, QGuiApplication, QPalette, QShowEvent
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.controllers.endpoints import Endpoint, EndpointsController
from app.models.errors import SEVERITY_COLOURS
from app.window.banners import Banner
from app.window.widgets import muted_label, page_title

COPIED_FEEDBACK_MS = 1500
INTRO = (
    "Point any app that speaks one of these APIs at its address: Open WebUI, Continue, or a "
    "script using the ollama or openai package. PAIR sends each request to a computer that "
    "has the model."
)
NOT_CONNECTED = "The addresses appear once the PAIR service is running."
NO_DOORS = "The front doors are not open yet; they open a moment after the service starts."


def copy_text(text: str) -> None:
    """Put ``text`` on the system clipboard."""
    QGuiApplication.clipboard().setText(text)


class CopyButton(QPushButton):
    """A Copy button that copies what ``text_source`` says and confirms with "Copied"."""

    def __init__(self, tooltip: str, parent: QWidget | None = None) -> None:
        super().__init__("Copy", parent)
        self.setToolTip(tooltip)
        self.text_to_copy = ""
        self._reset = QTimer(self)
        self._reset.setSingleShot(True)
        self._reset.setInterval(COPIED_FEEDBACK_MS)
        self._reset.timeout.connect(self._on_reset_timeout)
        self.clicked.connect(self._on_clicked)
        self.setMinimumWidth(self.sizeHint().width() + 16)  # room for "Copied"

    def _on_clicked(self) -> None:
        copy_text(self.text_to_copy)
        self.setText("Copied")
        self._reset.start()

    def _on_reset_timeout(self) -> None:
        self.setText("Copy")


def _code_label() -> QLabel:
    """Selectable monospace text on the input background, sized to its lines."""
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setFrameShape(QFrame.Shape.StyledPanel)
    label.setAutoFillBackground(True)
    label.setBackgroundRole(QPalette.ColorRole.Base)
    label.setMargin(6)
    return label


class EndpointCard(QFrame):
    """One front door: title, URL + Copy, client setting, moved-port note, example + Copy."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.title = QLabel()
        self.url = QLineEdit()
        self.url.setReadOnly(True)
        self.url.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.copy_url = CopyButton("Copy this address")
        self.setting = muted_label()
        self.setting.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note = Banner(SEVERITY_COLOURS["warning"], "Port moved", "")
        self.example = _code_label()
        self.copy_example = CopyButton("Copy this example command")
        grid = QGridLayout(self)
        grid.setContentsMargins(14, 10, 14, 10)
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(6)
        grid.setColumnStretch(0, 1)
        grid.addWidget(self.title, 0, 0, 1, 2)
        grid.addWidget(self.url, 1, 0)
        grid.addWidget(self.copy_url, 1, 1)
        grid.addWidget(self.setting, 2, 0, 1, 2)
        grid.addWidget(self.note, 3, 0, 1, 2)
        grid.addWidget(muted_label("Example request"), 4, 0, 1, 2)
        grid.addWidget(self.example, 5, 0)
        grid.addWidget(self.copy_example, 5, 1, Qt.AlignmentFlag.AlignTop)

    def show_endpoint(self, endpoint: Endpoint) -> None:
        """Show ``endpoint`` (in place, so a refresh does not disturb a selection)."""
        self.title.setText(f"<b>{endpoint.title}</b>")
        if self.url.text() != endpoint.url:
            self.url.setText(endpoint.url)
            self.url.setCursorPosition(0)
        self.copy_url.text_to_copy = endpoint.url
        setting = f"Client setting: {endpoint.client_setting}"
        if endpoint.model is None:
            setting += " · no model known yet"
        self.setting.setText(setting)
        self.note.message.setText(endpoint.moved_note or "")
        self.note.setVisible(endpoint.moved_note is not None)
        self.example.setText(endpoint.example)
        self.copy_example.text_to_copy = endpoint.example


class EndpointsWindow(QWidget):
    """A separate window listing the front doors; refreshed whenever it is shown."""

    def __init__(self, controller: EndpointsController, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("PAIR – API endpoints")
        self._controller = controller
        self.cards: dict[str, EndpointCard] = {}
        self.empty_note = muted_label()
        self._cards_layout = QVBoxLayout()
        self._cards_layout.setSpacing(10)
        close_button = QPushButton("Close")
        close_button.clicked.connect(self.close)
        self._lay_out(close_button)
        controller.changed.connect(self._on_controller_changed)
        self._on_controller_changed()

    def sizeHint(self) -> QSize:
        """Wide enough for a curl example without scrolling."""
        return QSize(720, 790)

    def show_and_raise(self) -> None:
        """Show the window (re-reading the doors) and bring it to the front."""
        if not self.isVisible():
            self.resize(self.sizeHint().boundedTo(self.screen().availableSize()))
        self.show()
        self.raise_()
        self.activateWindow()

    def showEvent(self, event: QShowEvent) -> None:
        """Re-read the doors each time the window opens."""
        super().showEvent(event)
        self._controller.refresh()

    def _lay_out(self, close_button: QPushButton) -> None:
        body = QWidget()
        body_layout = QVBoxLayout(body)
        body_layout.setContentsMargins(24, 20, 24, 12)
        body_layout.setSpacing(10)
        body_layout.addWidget(page_title("API endpoints"))
        body_layout.addWidget(muted_label(INTRO))
        body_layout.addWidget(self.empty_note)
        body_layout.addLayout(self._cards_layout)
        body_layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidget(body)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        buttons = QHBoxLayout()
        buttons.setContentsMargins(24, 0, 24, 16)
        buttons.addStretch(1)
        buttons.addWidget(close_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll, 1)
        layout.addLayout(buttons)

    def _on_controller_changed(self) -> None:
        endpoints = self._controller.endpoints
        doors = {endpoint.door for endpoint in endpoints}
        for door in [door for door in self.cards if door not in doors]:
            self.cards.pop(door).deleteLater()
        for position, endpoint in enumerate(endpoints):
            card = self.cards.get(endpoint.door)
            if card is None:
                card = self.cards[endpoint.door] = EndpointCard()
                card.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
            self._cards_layout.insertWidget(position, card)
            card.show_endpoint(endpoint)
        if endpoints:
            self.empty_note.hide()
        else:
            self.empty_note.setText(NO_DOORS if self._controller.known else NOT_CONNECTED)
            self.empty_note.show()
