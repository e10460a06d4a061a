"""The main window: banners on top, a sidebar of pages, and the page stack."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from PySide6.QtCore import QEvent, QSize, Qt, Signal
from PySide6.QtGui import QCloseEvent, QPalette
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QMainWindow,
    QPushButton,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.broker.connection import BrokerConnection
from app.broker.state import Ownership, ServiceState
from app.controllers.errors import ErrorsController
from app.controllers.service import ServiceController
from app.icons import app_icon
from app.models.components import ComponentsModel
from app.models.display_text import display_text
from app.models.errors import ErrorsModel
from app.window.banners import ErrorBanners, ServiceNotice
from app.window.empty_page import EmptyPage
from app.window.indicator import StateDot
from app.window.look import STATE_LOOKS
from app.window.service_page import ServicePage
from app.window.shortcuts import (
    CLOSE_KEYS,
    FIND_KEYS,
    QUIT_KEYS,
    add_shortcut,
    focus_search_of,
    page_keys,
)
from app.window.widgets import (
    CARD_MARGINS,
    PAGE_MARGINS,
    SPACE,
    SPACE_SECTION,
    SPACE_TIGHT,
    page_title,
)

EMPTY_PAGES: tuple[tuple[str, str, str, str], ...] = (
    (
        "overview",
        "Overview",
        "No computers to show yet",
        "Your computers and their live GPU, CPU and memory use will appear here "
        "once the service reports them.",
    ),
    (
        "engines",
        "Engines",
        "No engines yet",
        "Ollama, LM Studio and llama.cpp on this computer will be listed here to install, "
        "start and stop.",
    ),
    (
        "models",
        "Models",
        "No models yet",
        "Models served by the engines on your computers will be listed here, "
        "ready to load, eject, delete or pull.",
    ),
    (
        "playground",
        "Playground",
        "Nothing to try yet",
        "Once an engine runs a model, send it a message here and see which computer answers "
        "and how fast.",
    ),
    (
        "jobs",
        "Jobs",
        "No jobs yet",
        "Every request that goes through PAIR will show up here while it runs and afterwards.",
    ),
    (
        "cluster",
        "Cluster",
        "Not in a cluster yet",
        "Pair your other computers with a six-digit PIN to share their models and GPUs.",
    ),
)
STATUS_MESSAGE_MS = 8000
# Checked against every page filled by the demo (scripts/render_demo_screens.py at this size):
# narrower, the Jobs filters and the Models buttons are cut off.
MINIMUM_SIZE = QSize(900, 560)


class Page(NamedTuple):
    """A page of the sidebar: its name (for ``show_page``), its title and its widget."""

    name: str
    title: str
    widget: QWidget


class SettingsPage(QWidget):
    """Settings, one tab per area: the given ones, then Service."""

    def __init__(
        self,
        service_page: ServicePage,
        tabs: Sequence[tuple[str, QWidget]] = (),
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        for title, widget in tabs:
            self.tabs.addTab(widget, title)
        self.tabs.addTab(service_page, "Service")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(*PAGE_MARGINS)
        layout.addWidget(page_title("Settings"))
        layout.addWidget(self.tabs, 1)


class MainWindow(QMainWindow):
    """Top-level window. Closing hides it when a tray icon exists, otherwise asks to quit."""

    quit_requested = Signal()
    endpoints_requested = Signal()
    about_requested = Signal()

    def __init__(
        self,
        connection: BrokerConnection,
        service: ServiceController,
        components: ComponentsModel,
        errors: ErrorsModel,
        errors_controller: ErrorsController,
        *,
        hide_on_close: bool,
        pages: Sequence[Page] = (),
        settings_tabs: Sequence[tuple[str, QWidget]] = (),
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("PAIR")
        self.setWindowIcon(app_icon())
        self.setMinimumSize(MINIMUM_SIZE)
        self.hide_on_close = hide_on_close
        self._connection = connection
        self.service_page = ServicePage(connection, service, components)
        self.service_notice = ServiceNotice(connection, service)
        self.error_banners = ErrorBanners(errors, errors_controller)
        self.sidebar = QListWidget()
        self.stack = QStackedWidget()
        self._page_names: list[str] = []
        given = {page.name: page for page in pages}
        for name, title, headline, message in EMPTY_PAGES:
            page = given.pop(name, None)
            self._add_page(
                name, title, page.widget if page else EmptyPage(title, headline, message)
            )
        for page in given.values():  # pages without a placeholder go before Settings
            self._add_page(page.name, page.title, page.widget)
        self.settings_page = SettingsPage(self.service_page, settings_tabs)
        self._add_page("settings", "Settings", self.settings_page)
        self._lay_out()
        self._add_window_shortcuts()
        self._build_status_bar()
        self.sidebar.currentRowChanged.connect(self.stack.setCurrentIndex)
        self.sidebar.setCurrentRow(0)
        errors_controller.open_settings_requested.connect(lambda: self.show_page("settings"))

    def sizeHint(self) -> QSize:
        """A comfortable first size."""
        return QSize(1000, 680)

    def show_page(self, name: str) -> None:
        """Switch to the page called ``name`` (overview, models, jobs, cluster, settings)."""
        self.sidebar.setCurrentRow(self._page_names.index(name))

    @property
    def current_page(self) -> str:
        """The name of the page shown."""
        return self._page_names[self.stack.currentIndex()]

    def closeEvent(self, event: QCloseEvent) -> None:
        """Hide to the tray, or quit when there is no tray."""
        if self.hide_on_close:
            event.ignore()
            self.hide()
            return
        event.accept()
        self.quit_requested.emit()

    def focus_search(self) -> bool:
        """Focus the current page's search or filter field; whether the page has one."""
        return focus_search_of(self.stack.currentWidget())

    def close_to_tray(self) -> None:
        """Hide the window when a tray keeps PAIR running; without one, do nothing."""
        if self.hide_on_close:
            self.hide()

    def _add_window_shortcuts(self) -> None:
        add_shortcut(self, QUIT_KEYS, self.quit_requested.emit)
        add_shortcut(self, FIND_KEYS, self.focus_search)
        add_shortcut(self, CLOSE_KEYS, self.close_to_tray)

    def _add_page(self, name: str, title: str, page: QWidget) -> None:
        index = len(self._page_names)
        self._page_names.append(name)
        self.sidebar.addItem(title)
        self.stack.addWidget(page)
        keys = page_keys(index)
        if keys is not None:
            add_shortcut(self, keys, lambda: self.sidebar.setCurrentRow(index))
            self.sidebar.item(index).setToolTip(keys)

    def _sidebar_panel(self) -> QWidget:
        self.sidebar.setFrameShape(QListWidget.Shape.NoFrame)
        inset = CARD_MARGINS[0]  # the items' text starts under the name beside the mark
        self.sidebar.setStyleSheet(f"QListWidget::item {{ padding: {SPACE}px {inset}px; }}")
        self.sidebar.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        mark = QLabel()
        mark.setPixmap(app_icon().pixmap(QSize(28, 28)))
        name = QLabel("<b>PAIR</b>")
        header = QHBoxLayout()
        header.setContentsMargins(inset, PAGE_MARGINS[1] - SPACE_TIGHT, inset, SPACE_SECTION)
        header.setSpacing(SPACE)
        header.addWidget(mark)
        header.addWidget(name, 1)
        panel = QWidget()
        panel.setFixedWidth(170)
        panel.setAutoFillBackground(True)
        panel.setBackgroundRole(QPalette.ColorRole.Base)  # one surface with the list
        layout = QVBoxLayout(panel)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(header)
        layout.addWidget(self.sidebar, 1)
        self.endpoints_button = QPushButton("API endpoints…")
        self.endpoints_button.setFlat(True)
        self.endpoints_button.setToolTip("Where to point Ollama and OpenAI clients")
        self.endpoints_button.clicked.connect(self.endpoints_requested)
        layout.addWidget(self.endpoints_button)
        self.about_button = QPushButton("About PAIR")
        self.about_button.setFlat(True)
        self.about_button.setToolTip("Version, build commit, data folder and licences")
        self.about_button.clicked.connect(self.about_requested)
        layout.addWidget(self.about_button)
        layout.addSpacing(SPACE_SECTION)
        return panel

    def _lay_out(self) -> None:
        banners = QVBoxLayout()
        banners.setContentsMargins(PAGE_MARGINS[0], SPACE_SECTION, PAGE_MARGINS[2], 0)
        banners.setSpacing(SPACE)
        banners.addWidget(self.service_notice)
        banners.addWidget(self.error_banners)
        content = QVBoxLayout()
        content.setContentsMargins(0, 0, 0, 0)
        content.setSpacing(0)
        content.addLayout(banners)
        content.addWidget(self.stack, 1)
        central = QWidget()
        layout = QHBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self._sidebar_panel())
        layout.addLayout(content, 1)
        self.setCentralWidget(central)

    def _build_status_bar(self) -> None:
        self.status_dot = StateDot(10)
        self.status_text = QLabel()
        bar = self.statusBar()
        bar.addPermanentWidget(self.status_dot)
        bar.addPermanentWidget(self.status_text)
        self._connection.state_changed.connect(self._on_connection_state_changed)
        self._connection.session_changed.connect(self._refresh_status)
        self._refresh_status()

    def _refresh_status(self) -> None:
        state = self._connection.state
        self.status_dot.set_state(state)
        text = f"Service: {STATE_LOOKS[state].label}"
        if state is ServiceState.READY and self._connection.ownership is Ownership.ATTACHED:
            text += " (attached)"
        self.status_text.setText(text)

    def _on_connection_state_changed(self, _state: ServiceState) -> None:
        self._refresh_status()

    def changeEvent(self, event: QEvent) -> None:
        """Colour the status dot again when the palette turns light or dark."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._refresh_status()

    def show_status_message(self, message: str) -> None:
        """Show a transient message (e.g. a failed command) in the status bar."""
        self.statusBar().showMessage(display_text(message), STATUS_MESSAGE_MS)
