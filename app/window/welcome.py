"""First run: a welcome dialog, shown once, that finds this computer's engines, offers to start
or install them, gets a first model that fits this computer, opens the Playground to try it, and
says where apps connect."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from PySide6.QtCore import QObject, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QPalette, QShowEvent
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QGroupBox,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.broker.connection import BrokerConnection
from app.broker.state import ServiceState
from app.catalog import Catalog
from app.controllers.activity import ActivityController
from app.controllers.endpoints import EndpointsController
from app.controllers.models import ModelsController
from app.controllers.welcome_model import FirstModelController
from app.models.display_text import display_text
from app.models.errors import SEVERITY_COLOURS
from app.models.nodes import NodesModel
from app.window.look import STATE_LOOKS
from app.window.welcome_model import FirstModelBox, TryBox
from app.window.widgets import muted_label, page_title
from backend.protocol.types.engines import EngineStatus

WELCOME_SHOWN_KEY = "welcome/shown"
INTRO = (
    "PAIR runs the AI engines on your computers and gives every app one place to reach them. "
    "Start with the engines on this computer:"
)
CLUSTER_HINT = "Your other computers can join later from the Cluster page, with a six-digit PIN."
DEMO_NOT_INSTALLED = "Not installed: the demo's computers install no engines"


def welcome_shown(preferences: QSettings) -> bool:
    """Whether the welcome dialog was already shown on this computer."""
    return bool(preferences.value(WELCOME_SHOWN_KEY, False, type=bool))


def endpoints_text(front_doors: Mapping[str, str], url: Callable[[str], str] = str) -> str:
    """Two sentences on where apps connect, with the real URLs (each passed through ``url``)
    when the doors are open."""
    ollama = url(front_doors["ollama"]) if "ollama" in front_doors else None
    door = next((d for d in ("openai", "llamacpp", "ollama") if d in front_doors), None)
    openai = url(front_doors[door] + "/v1") if door is not None else None
    parts = []
    if ollama:
        parts.append(f"apps that speak the Ollama API connect to {ollama}")
    if openai:
        parts.append(f"apps that speak the OpenAI API to {openai}")
    if not parts:
        first = "Apps connect to PAIR the way they connect to Ollama or LM Studio, once it runs."
    else:
        first = ", and ".join(parts) + "."
        first = first[0].upper() + first[1:]
    return (
        f"{first} Every address reaches every model of every computer, whatever engine runs "
        "it; API endpoints… (in the window's sidebar and the tray menu) shows them again, with "
        "the Anthropic API and example requests."
    )


def engine_state_text(
    engine: EngineStatus,
    progress: str | None,
    error: str | None,
    *,
    busy: bool = False,
    demo: bool = False,
) -> str:
    """What an engine row says about the engine: the install's progress or a pending command
    first, then its last error (whole), then its state."""
    if progress:
        return progress
    if busy:
        return "Starting…" if engine.installed else "Installing…"
    if error:
        return display_text(error)
    if not engine.installed:
        return DEMO_NOT_INSTALLED if demo else "Not installed"
    if engine.state == "running":
        return "Running" + (" (started outside PAIR)" if engine.adopted else "")
    if engine.state == "error" and engine.error:
        return f"Failed: {display_text(engine.error)}"
    return {"starting": "Starting…", "stopping": "Stopping…"}.get(engine.state, "Installed")


def _unbroken_url(url: str) -> str:
    # Word joiners stop Qt from wrapping a URL after "http://" (it ignores <nobr> inside a
    # paragraph). They would spoil a copied URL, so the text is not selectable: the Copy
    # buttons of the endpoints window are the way to copy.
    return url.replace("/", "/\N{WORD JOINER}")


class EngineRows(QGroupBox):
    """One row per engine: name, what it is doing, and Start or Install."""

    def __init__(
        self, activity: ActivityController, parent: QWidget | None = None, *, demo: bool = False
    ) -> None:
        super().__init__("Engines on this computer", parent)
        self._activity = activity
        self._demo = demo  # the demo's computers cannot install: no Install button
        self._grid = QGridLayout(self)
        self._grid.setColumnStretch(1, 1)
        self._grid.setHorizontalSpacing(16)
        self.searching = muted_label("Looking for engines…")
        self._grid.addWidget(self.searching, 0, 0, 1, 3)
        self.names: dict[str, QLabel] = {}
        self.states: dict[str, QLabel] = {}
        self.buttons: dict[str, QPushButton] = {}
        activity.changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        """Show every engine the service knows (rows are added once, then updated)."""
        engines = self._activity.engines
        self.searching.setVisible(not engines)
        for engine in engines:
            if engine.engine not in self.names:
                self._add_row(engine.engine)
            self._show(engine)

    def _add_row(self, name: str) -> None:
        row = len(self.names) + 1
        self.names[name] = QLabel()
        self.states[name] = QLabel()
        # An error is shown whole: wrapped, selectable for a bug report, never clipped.
        self.states[name].setWordWrap(True)
        self.states[name].setTextFormat(Qt.TextFormat.PlainText)
        self.states[name].setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.buttons[name] = QPushButton()
        self.buttons[name].clicked.connect(lambda: self._on_button_clicked(name))
        self._grid.addWidget(self.names[name], row, 0)
        self._grid.addWidget(self.states[name], row, 1)
        self._grid.addWidget(self.buttons[name], row, 2, Qt.AlignmentFlag.AlignRight)

    def _show(self, engine: EngineStatus) -> None:
        name = engine.engine
        busy = self._activity.is_busy(name)
        error = self._activity.engine_errors.get(name)
        self.names[name].setText(f"<b>{engine.display_name}</b>")
        state = self.states[name]
        progress = self._activity.install_progress.get(name)
        state.setText(engine_state_text(engine, progress, error, busy=busy, demo=self._demo))
        running = engine.state == "running"
        colour = None
        if error or engine.state == "error":
            colour = SEVERITY_COLOURS["error"]
        elif running:
            colour = STATE_LOOKS[ServiceState.READY].colour
        # Plain states in the secondary text colour, running and failed ones in theirs.
        state.setStyleSheet(f"color: {colour.name()};" if colour is not None else "")
        state.setForegroundRole(
            QPalette.ColorRole.PlaceholderText if colour is None else QPalette.ColorRole.WindowText
        )
        button = self.buttons[name]
        button.setVisible(not running and (engine.installed or not self._demo))
        if not engine.installed:
            button.setText("Installing…" if busy else "Install")
        else:
            button.setText("Starting…" if busy or engine.state == "starting" else "Start")
        button.setEnabled(not busy and engine.state not in ("starting", "stopping"))

    def _on_button_clicked(self, name: str) -> None:
        engine = next((e for e in self._activity.engines if e.engine == name), None)
        if engine is None:
            return
        if engine.installed:
            self._activity.set_engine_on(engine.engine, True)
        else:
            self._activity.install_engine(engine.engine)


class WelcomeDialog(QDialog):
    """The first-run dialog: engines to start or install, a first model to get and try, and
    where apps connect. ``try_requested`` carries the model to open in the Playground (the
    dialog has closed by then)."""

    try_requested = Signal(str)

    def __init__(
        self,
        activity: ActivityController,
        endpoints: EndpointsController,
        first_model: FirstModelController,
        parent: QWidget | None = None,
        *,
        demo: bool = False,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Welcome to PAIR")
        self._activity = activity
        self._endpoints = endpoints
        self.engine_rows = EngineRows(activity, demo=demo)
        self.first_model = FirstModelBox(first_model)
        self.try_box = TryBox(first_model)
        self.try_box.try_requested.connect(self._on_try_box_try_requested)
        first_model.changed.connect(self._on_activity_changed)
        activity.changed.connect(self._on_activity_changed)
        self.endpoints_label = QLabel()
        self.endpoints_label.setWordWrap(True)
        self.endpoints_label.setTextFormat(Qt.TextFormat.PlainText)
        self.done_button = self._lay_out()
        self.setMinimumWidth(600)
        endpoints.changed.connect(self._on_endpoints_changed)
        self._on_endpoints_changed()

    def _lay_out(self) -> QPushButton:
        buttons = QDialogButtonBox()
        done = buttons.addButton("Done", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self.accept)
        endpoints_box = QGroupBox("Using PAIR from your apps")
        QVBoxLayout(endpoints_box).addWidget(self.endpoints_label)
        layout = self._layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 20, 24, 16)
        layout.setSpacing(12)
        for widget in (page_title("Welcome to PAIR"), muted_label(INTRO), self.engine_rows):
            layout.addWidget(widget)
        layout.addWidget(self.first_model)
        layout.addWidget(self.try_box)
        layout.addWidget(endpoints_box)
        layout.addWidget(muted_label(CLUSTER_HINT))
        layout.addStretch(1)
        layout.addWidget(buttons)
        return done

    def showEvent(self, event: QShowEvent) -> None:
        """Look for engines afresh each time the dialog opens."""
        super().showEvent(event)
        self.try_box.focus_if_ready()
        self._activity.detect_engines()
        self._endpoints.refresh()

    def _on_endpoints_changed(self) -> None:
        text = endpoints_text(self._endpoints.front_doors, _unbroken_url)
        self.endpoints_label.setText(text)
        self._fit_height()

    def _on_try_box_try_requested(self, model: str) -> None:
        self.accept()
        self.try_requested.emit(model)

    def _on_activity_changed(self) -> None:
        # After the rows took their new texts and the layouts their new heights.
        QTimer.singleShot(0, self, self._fit_height)

    def _fit_height(self) -> None:
        # Wrapped labels grow taller when their text arrives after the dialog was laid out;
        # Qt does not grow a top-level window for that by itself.
        layout = self._layout
        needed = layout.totalHeightForWidth(self.width()) if layout.hasHeightForWidth() else 0
        if needed > self.height():
            self.resize(self.width(), needed)


class Welcome(QObject):
    """Shows the welcome dialog the first time this app reaches a ready service, unless the
    preferences say it was shown before; closing it in any way records that it was shown.
    Its Try it step calls ``open_playground`` with the model to select."""

    def __init__(
        self,
        connection: BrokerConnection,
        activity: ActivityController,
        endpoints: EndpointsController,
        preferences: QSettings,
        window: QWidget | None = None,
        *,
        models: ModelsController,
        nodes: NodesModel,
        catalog: Catalog,
        open_playground: Callable[[str], None],
        demo: bool = False,
    ) -> None:
        super().__init__(window)
        self._demo = demo
        self._activity = activity
        self._endpoints = endpoints
        self.first_model = FirstModelController(models, nodes, activity, catalog, self)
        self._open_playground = open_playground
        self._preferences = preferences
        self._window = window
        self._offered = False
        self.dialog: WelcomeDialog | None = None
        connection.session_ready.connect(self._on_connection_session_ready)

    def _on_connection_session_ready(self) -> None:
        if self._offered or welcome_shown(self._preferences):
            return
        self._offered = True
        self.dialog = WelcomeDialog(
            self._activity, self._endpoints, self.first_model, self._window, demo=self._demo
        )
        self.dialog.finished.connect(self._on_dialog_finished)
        self.dialog.try_requested.connect(self._open_playground)
        self.dialog.show()

    def _on_dialog_finished(self, _result: int) -> None:
        self._preferences.setValue(WELCOME_SHOWN_KEY, True)
        self._preferences.sync()
