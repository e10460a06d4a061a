"""The API endpoints window: one card per client API (the address with a Copy button, the
client setting, an example request), then the front doors' real ports with a note when one
had to move."""

from __future__ import annotations

from typing import TypeVar

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

from app.controllers.endpoint_texts import KEY_NOTE
from app.controllers.endpoints import Door, Endpoint, EndpointsController
from app.window.banners import Banner
from app.window.look import State
from app.window.widgets import (
    PAGE_MARGINS,
    SPACE,
    SPACE_SECTION,
    SPACE_TIGHT,
    muted_label,
    page_title,
    section_title,
)

COPIED_FEEDBACK_MS = 1500
INTRO = (
    "Every address reaches every model of every computer in your cluster, in all three APIs "
    "(PAIR translates where the model's engine speaks another). Point Open WebUI, Continue, "
    "Claude Code or a script using the ollama, openai or anthropic package at its API's address."
)
PORTS_TEXT = "The doors are equal; each sits where apps look for Ollama, LM Studio or llama-server."
NODE_API_TEXT = (
    "Other PAIR computers reach this one here (TLS, to pair and to share models); it is not a "
    "client API."
)
NO_ADDRESS = "This computer has no network address other computers can use."
WINDOW_TITLE = "API endpoints"  # the desktop adds " — PAIR" (the application's display name)
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


def _url_field() -> QLineEdit:
    field = QLineEdit()
    field.setReadOnly(True)
    field.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
    return field


def _show_url(field: QLineEdit, url: str) -> None:
    """Change the text only when it changed, so a refresh does not disturb a selection."""
    if field.text() != url:
        field.setText(url)
        field.setCursorPosition(0)


class EndpointCard(QFrame):
    """One client API: title and the examples' model, address + Copy, the client settings its
    SDK needs + Copy, example request + Copy."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.title = QLabel()
        self.model_note = muted_label()
        self.model_note.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.url = _url_field()
        self.copy_url = CopyButton("Copy this address")
        self.setting = _code_label()
        self.setting.setToolTip("The client settings (environment variables) its SDK reads")
        self.copy_setting = CopyButton("Copy these settings")
        self.example = _code_label()
        self.example.setToolTip("An example request")
        self.copy_example = CopyButton("Copy this example command")
        heading = QHBoxLayout()
        heading.addWidget(self.title)
        heading.addWidget(self.model_note, 1)
        grid = QGridLayout(self)
        grid.setContentsMargins(14, SPACE, 14, SPACE)
        grid.setHorizontalSpacing(SPACE)
        grid.setVerticalSpacing(SPACE_TIGHT)
        grid.setColumnStretch(0, 1)
        grid.addLayout(heading, 0, 0, 1, 2)
        grid.addWidget(self.url, 1, 0)
        grid.addWidget(self.copy_url, 1, 1)
        grid.addWidget(self.setting, 2, 0)
        grid.addWidget(self.copy_setting, 2, 1, Qt.AlignmentFlag.AlignBottom)
        grid.addWidget(self.example, 3, 0)
        grid.addWidget(self.copy_example, 3, 1, Qt.AlignmentFlag.AlignBottom)

    def show_endpoint(self, endpoint: Endpoint) -> None:
        """Show ``endpoint`` (in place, so a refresh does not disturb a selection)."""
        self.title.setText(f"<b>{endpoint.title}</b>")
        _show_url(self.url, endpoint.url)
        self.copy_url.text_to_copy = endpoint.url
        settings = "\n".join(endpoint.client_settings or (endpoint.client_setting,))
        self.setting.setText(settings)
        self.copy_setting.text_to_copy = settings
        model = endpoint.model
        self.model_note.setText("no model known yet" if model is None else f"example: {model}")
        self.example.setText(endpoint.example)
        self.copy_example.text_to_copy = endpoint.example


class DoorRow(QWidget):
    """One front door: whose usual port it takes, its real URL + Copy, a moved-port note."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.label = QLabel()
        self.label.setMinimumWidth(130)
        self.url = _url_field()
        self.copy_url = CopyButton("Copy this address")
        self.note = Banner(State.WARN, "Port moved", "")
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(8)
        grid.setColumnStretch(1, 1)
        grid.addWidget(self.label, 0, 0)
        grid.addWidget(self.url, 0, 1)
        grid.addWidget(self.copy_url, 0, 2)
        grid.addWidget(self.note, 1, 0, 1, 3)

    def show_door(self, door: Door) -> None:
        """Show ``door`` (in place)."""
        self.label.setText(f"{door.usual_port_of}'s port")
        _show_url(self.url, door.url)
        self.copy_url.text_to_copy = door.url
        self.note.message.setText(door.moved_note or "")
        self.note.setVisible(door.moved_note is not None)


class EndpointsWindow(QWidget):
    """A separate window listing the client APIs and the doors; refreshed whenever shown."""

    def __init__(self, controller: EndpointsController, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle(WINDOW_TITLE)
        self._controller = controller
        self.cards: dict[str, EndpointCard] = {}  # by API
        self.doors: dict[str, DoorRow] = {}  # by door
        self.empty_note = muted_label()
        self.key_note = muted_label(KEY_NOTE)
        self.node_api = QWidget()
        self.node_api_urls = _code_label()
        node_api_layout = QVBoxLayout(self.node_api)
        node_api_layout.setContentsMargins(0, SPACE_TIGHT, 14, 0)
        node_api_layout.setSpacing(SPACE_TIGHT)
        node_api_layout.addWidget(section_title("Node API"))
        node_api_layout.addWidget(muted_label(NODE_API_TEXT))
        node_api_layout.addWidget(self.node_api_urls)
        self._cards_layout = QVBoxLayout()
        self._cards_layout.setSpacing(SPACE_SECTION)
        self.ports = QWidget()
        self._doors_layout = QVBoxLayout(self.ports)
        self._doors_layout.setContentsMargins(0, SPACE_TIGHT, 14, 0)  # the Copy buttons line up
        self._doors_layout.setSpacing(SPACE_TIGHT)
        self._doors_layout.addWidget(section_title("Ports"))
        self._doors_layout.addWidget(muted_label(PORTS_TEXT))
        close_button = QPushButton("Close")
        close_button.clicked.connect(self.close)
        self._lay_out(close_button)
        controller.changed.connect(self._on_controller_changed)
        self._on_controller_changed()

    def sizeHint(self) -> QSize:
        """Wide enough for a curl example without scrolling."""
        return QSize(720, 820)

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
        left, top, right, _ = PAGE_MARGINS
        body_layout.setContentsMargins(left, top, right, SPACE_SECTION)
        body_layout.setSpacing(SPACE_SECTION)
        body_layout.addWidget(page_title("API endpoints"))
        body_layout.addWidget(muted_label(INTRO))
        body_layout.addWidget(self.empty_note)
        body_layout.addLayout(self._cards_layout)
        body_layout.addWidget(self.key_note)
        body_layout.addWidget(self.ports)
        body_layout.addWidget(self.node_api)
        body_layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidget(body)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        buttons = QHBoxLayout()
        buttons.setContentsMargins(left, 0, right, PAGE_MARGINS[3] - SPACE)
        buttons.addStretch(1)
        buttons.addWidget(close_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll, 1)
        layout.addLayout(buttons)

    def _on_controller_changed(self) -> None:
        endpoints = self._controller.endpoints
        _sync(self.cards, [e.api for e in endpoints], EndpointCard, self._cards_layout, 0)
        for endpoint in endpoints:
            self.cards[endpoint.api].show_endpoint(endpoint)
        doors = self._controller.doors
        _sync(self.doors, [d.door for d in doors], DoorRow, self._doors_layout, 2)
        for door in doors:
            self.doors[door.door].show_door(door)
        self.ports.setVisible(bool(doors))
        self.key_note.setVisible(bool(endpoints))
        self._show_node_api()
        if endpoints:
            self.empty_note.hide()
        else:
            self.empty_note.setText(NO_DOORS if self._controller.known else NOT_CONNECTED)
            self.empty_note.show()

    def _show_node_api(self) -> None:
        known = self._controller.known
        urls = self._controller.node_api
        self.node_api_urls.setText("\n".join(urls) if urls else NO_ADDRESS)
        self.node_api.setVisible(known)


W = TypeVar("W", bound=QWidget)


def _sync(
    widgets: dict[str, W], keys: list[str], make: type[W], layout: QVBoxLayout, at: int
) -> None:
    """Make ``widgets`` hold one widget per key, in the keys' order, from ``at`` on in
    ``layout`` (kept widgets are moved, not rebuilt)."""
    for key in [key for key in widgets if key not in keys]:
        widgets.pop(key).deleteLater()
    for position, key in enumerate(keys):
        widget = widgets.get(key)
        if widget is None:
            widget = widgets[key] = make()
        layout.insertWidget(at + position, widget)
