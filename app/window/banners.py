"""Banners at the top of the window: service errors, and a notice when the service is down."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.broker.connection import BrokerConnection
from app.broker.state import ServiceState
from app.controllers.errors import ErrorsController
from app.controllers.service import ServiceController
from app.models.display_text import display_text
from app.models.errors import ErrorsModel, Problem
from app.window.look import SEVERITY_STATES, State, state_colour
from app.window.widgets import SPACE, SPACE_SECTION, SPACE_TIGHT

MAX_BANNERS = 4
MESSAGE_MIN_WIDTH = 280
_SEVERITY_TITLES = {"info": "Note", "warning": "Warning", "error": "Error"}


def banner_style(colour: QColor) -> str:
    """A banner's frame: a faint wash of ``colour`` and a bar of it on the left."""
    red, green, blue = colour.red(), colour.green(), colour.blue()
    return (
        f"#banner {{ background: rgba({red}, {green}, {blue}, 28);"
        f" border-left: 4px solid {colour.name()}; border-radius: 3px; }}"
    )


class Banner(QFrame):
    """A tinted strip with a bold title, a message and optional buttons on the right; a
    ``State`` tints it with that state's shade for the palette, light or dark."""

    def __init__(
        self, colour: QColor | State, title: str, message: str, parent: QWidget | None = None
    ):
        super().__init__(parent)
        self.setObjectName("banner")
        self._colour = colour
        self._style = ""
        self._follow_palette()
        self._layout = QHBoxLayout(self)
        self._layout.setContentsMargins(SPACE_SECTION, SPACE_TIGHT, SPACE, SPACE_TIGHT)
        self.title = QLabel(f"<b>{title}</b>")
        self.message = QLabel(display_text(message))
        self.message.setWordWrap(True)
        self.message.setMinimumWidth(MESSAGE_MIN_WIDTH)  # wrapped, never a one-word column
        self._layout.addWidget(self.title)
        self._layout.addWidget(self.message, 1)

    def changeEvent(self, event: QEvent) -> None:
        """Take the state's other shade when the palette turns light or dark."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._follow_palette()

    def _follow_palette(self) -> None:
        colour = self._colour
        if isinstance(colour, State):
            # The application's palette: the banner's own window colour is its tinted wash.
            colour = state_colour(colour)
        style = banner_style(colour)
        if style != self._style:  # setting a style sheet sends a palette change
            self._style = style
            self.setStyleSheet(style)

    def add_button(self, text: str, on_click: Callable[[], None], tooltip: str = "") -> QPushButton:
        """Append a button on the right."""
        button = QPushButton(text)
        button.setToolTip(tooltip)
        button.clicked.connect(on_click)
        self._layout.addWidget(button)
        return button


class ErrorBanners(QWidget):
    """One banner per problem the controller shows (at most ``MAX_BANNERS``, then a "+K more"
    line): this computer's, then other members' with their names ("laptop: Ollama crashed";
    "laptop and gpu-box: …" when both report it), one line for a member that cannot be reached.
    Hidden, taking no space, while there is none."""

    def __init__(
        self, model: ErrorsModel, controller: ErrorsController, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self._model = model
        self._controller = controller
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(4)
        self.banners: list[Banner] = []
        self.more_label: QLabel | None = None  # "+K more" past MAX_BANNERS
        self._shown: list[tuple[Problem, bool]] | None = None  # what is on screen
        for signal in (model.rowsInserted, model.rowsRemoved, model.dataChanged, model.modelReset):
            signal.connect(self._on_model_changed)
        controller.names_changed.connect(self._on_model_changed)
        self._rebuild()

    def _on_model_changed(self, *_args: object) -> None:
        self._rebuild()

    def _rebuild(self) -> None:
        found = self._controller.banner_problems()
        signature = [(problem, self._offers_action(problem)) for problem in found]
        if signature == self._shown:
            return  # a name lookup changed nothing on screen: keep the widgets
        self._shown = signature
        while (item := self._layout.takeAt(0)) is not None:
            if (widget := item.widget()) is not None:
                widget.deleteLater()
        self.banners = [self._banner(problem) for problem in found[:MAX_BANNERS]]
        for banner in self.banners:
            self._layout.addWidget(banner)
        self.more_label = None
        if len(found) > MAX_BANNERS:
            self.more_label = QLabel(f"+{len(found) - MAX_BANNERS} more")
            self.more_label.setToolTip("\n".join(p.text for p in found[MAX_BANNERS:]))
            self._layout.addWidget(self.more_label)
        self.setVisible(bool(found))

    def _offers_action(self, problem: Problem) -> bool:
        return any(self._controller.offers_action(error) for error in problem.errors)

    def _banner(self, problem: Problem) -> Banner:
        error = problem.first
        banner = Banner(
            SEVERITY_STATES[error.severity], _SEVERITY_TITLES[error.severity], problem.text
        )
        if self._offers_action(problem) and error.action is not None:
            banner.add_button(
                error.action.label, lambda: self._controller.run_problem_action(problem)
            )
        banner.add_button(
            "Dismiss",
            lambda: self._controller.dismiss_problem(problem),
            "Hide this message; it comes back if the problem is reported again.",
        )
        return banner


class ServiceNotice(Banner):
    """Shown while the service is failed or disconnected, with a Start button."""

    def __init__(
        self,
        connection: BrokerConnection,
        controller: ServiceController,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(State.ERROR, "PAIR service", "", parent)
        self._connection = connection
        self.start_button = self.add_button(
            "Start", controller.start_service, "Start the PAIR service from this app."
        )
        connection.state_changed.connect(self._on_connection_state_changed)
        self._on_connection_state_changed(connection.state)

    def _on_connection_state_changed(self, state: ServiceState) -> None:
        down = state in (ServiceState.FAILED, ServiceState.DISCONNECTED)
        if down:
            reason = self._connection.failure_message
            headline = "is not running" if state is ServiceState.DISCONNECTED else "has failed"
            self.title.setText(f"<b>The PAIR service {headline}.</b>")
            self.message.setText(display_text(reason))
        self.setVisible(down)
