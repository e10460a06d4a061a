"""The tray icon: PAIR's state at a glance (a coloured dot on the mark), the running jobs, engines
on/off, and Endpoints / Show / Start / About / Quit."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QPointF, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QColor, QIcon, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from app.broker.connection import BrokerConnection
from app.broker.state import ServiceState
from app.controllers.activity import ActivityController, OverallStatus, is_on, overall_status
from app.controllers.service import ServiceController
from app.icons import state_icon
from app.window.look import STATE_LOOKS, State, state_colour
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineStatus

ICON_SIZES = (16, 22, 24, 32, 48, 64)
DOT_STATES: dict[OverallStatus, State] = {
    OverallStatus.READY: State.OK,
    OverallStatus.WORKING: State.INFO,
    OverallStatus.ERROR: State.ERROR,
    OverallStatus.CONNECTING: State.PENDING,
    OverallStatus.STOPPED: State.IDLE,
}


def tray_available() -> bool:
    """Whether the desktop has a system tray (offscreen and some Wayland sessions do not)."""
    return QSystemTrayIcon.isSystemTrayAvailable()


# A desktop's panel (and its tray) may start after PAIR when both start at login.
TRAY_POLL_MS = 3000


class TrayWatch(QObject):
    """Asks ``available`` every ``interval_ms`` until the desktop has a tray, then emits
    ``appeared`` once and stops. Owns its timer."""

    appeared = Signal()

    def __init__(
        self,
        available: Callable[[], bool] = tray_available,
        interval_ms: int = TRAY_POLL_MS,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._available = available
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._on_timer_timeout)

    def start(self) -> None:
        """Start asking."""
        self._timer.start()

    def stop(self) -> None:
        """Stop asking (idempotent)."""
        self._timer.stop()

    @property
    def watching(self) -> bool:
        """Whether it still asks."""
        return self._timer.isActive()

    def _on_timer_timeout(self) -> None:
        if self._available():
            self._timer.stop()
            self.appeared.emit()


def jobs_text(count: int) -> str:
    """``No jobs running``, ``1 job running``, ``3 jobs running``."""
    if count == 0:
        return "No jobs running"
    return f"{count} job running" if count == 1 else f"{count} jobs running"


def engine_label(engine: EngineStatus, busy: bool) -> str:
    """An engine's menu text: its name and what it is doing when that is not plain on/off."""
    if engine.state == "starting" or (busy and not is_on(engine)):
        return f"{engine.display_name} (starting…)"
    if engine.state == "stopping" or (busy and is_on(engine)):
        return f"{engine.display_name} (stopping…)"
    if engine.state == "error":
        return f"{engine.display_name} (failed)"
    if engine.adopted and is_on(engine):
        return f"{engine.display_name} (started outside PAIR)"
    return engine.display_name


def _dotted_pixmap(base: QIcon, size: int, colour: QColor) -> QPixmap:
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    try:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.drawPixmap(0, 0, base.pixmap(size, size))
        radius = size * 0.24
        centre = QPointF(size - radius - size * 0.02, size - radius - size * 0.02)
        # A white ring keeps the dot apart from the mark at 16 px.
        painter.setPen(QPen(QColor("white"), max(1.0, size * 0.06)))
        painter.setBrush(colour)
        painter.drawEllipse(centre, radius, radius)
    finally:
        painter.end()
    return pixmap


def status_icon(state: ServiceState, status: OverallStatus) -> QIcon:
    """The service-state mark with a dot in the overall status' colour (bottom right)."""
    base = state_icon(state)
    icon = QIcon()
    for size in ICON_SIZES:
        icon.addPixmap(_dotted_pixmap(base, size, state_colour(DOT_STATES[status])))
    return icon


class Tray(QObject):
    """Owns the tray icon and its menu. Without an ``ActivityController`` it shows the service
    state only; with one, also the jobs, the engines and the errors."""

    show_requested = Signal()
    quit_requested = Signal()
    endpoints_requested = Signal()
    about_requested = Signal()

    def __init__(
        self,
        connection: BrokerConnection,
        service: ServiceController,
        activity: ActivityController | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._connection = connection
        self._activity = activity
        self._icons: dict[tuple[ServiceState, OverallStatus], QIcon] = {}
        self.status: OverallStatus | None = None  # what the icon shows
        self._shown: tuple[ServiceState, OverallStatus] | None = None
        self.engine_actions: dict[str, QAction] = {}
        self._build_menu()
        self.icon = QSystemTrayIcon(self)
        self.icon.setContextMenu(self.menu)
        self.show_action.triggered.connect(self.show_requested)
        self.endpoints_action.triggered.connect(self.endpoints_requested)
        self.about_action.triggered.connect(self.about_requested)
        self.start_action.triggered.connect(service.start_service)
        self.quit_action.triggered.connect(self.quit_requested)
        self.icon.activated.connect(self._on_icon_activated)
        connection.state_changed.connect(self._on_connection_state_changed)
        if activity is not None:
            activity.changed.connect(self._on_activity_changed)
        self._refresh()

    def _build_menu(self) -> None:
        self.menu = QMenu()
        self.status_action = QAction(self.menu)
        self.status_action.setEnabled(False)
        self.jobs_action = QAction(self.menu)
        self.jobs_action.setEnabled(False)
        self.engines_header = QAction("Engines", self.menu)
        self.engines_header.setEnabled(False)
        self.no_engines_action = QAction("No engines installed", self.menu)
        self.no_engines_action.setEnabled(False)
        self.endpoints_action = QAction("API endpoints…", self.menu)
        self.show_action = QAction("Show PAIR", self.menu)
        self.start_action = QAction("Start service", self.menu)
        self.about_action = QAction("About PAIR", self.menu)
        self.quit_action = QAction("Quit PAIR", self.menu)
        self.menu.addActions([self.status_action, self.jobs_action])
        self._engines_separator = self.menu.addSeparator()
        self.menu.addActions([self.engines_header, self.no_engines_action])
        self._engines_end = self.menu.addSeparator()
        self.menu.addActions([self.endpoints_action, self.show_action, self.start_action])
        self.menu.addSeparator()
        self.menu.addActions([self.about_action, self.quit_action])
        has_activity = self._activity is not None
        for action in (self.jobs_action, self._engines_separator, self.engines_header):
            action.setVisible(has_activity)
        self.no_engines_action.setVisible(False)

    def show(self) -> None:
        """Put the icon in the tray."""
        self.icon.show()

    def hide(self) -> None:
        """Take the icon out of the tray."""
        self.icon.hide()

    def _on_connection_state_changed(self, _state: ServiceState) -> None:
        self._refresh()

    def _on_activity_changed(self) -> None:
        self._refresh()

    def _refresh(self) -> None:
        state = self._connection.state
        activity = self._activity
        status = activity.status if activity is not None else overall_status(state, 0, False)
        label = f"PAIR service: {STATE_LOOKS[state].label}"
        if (state, status) != self._shown:
            self._shown = (state, status)
            self.status = status
            self.icon.setIcon(self._icon(state, status))
        self.status_action.setText(label)
        self.start_action.setVisible(state in (ServiceState.FAILED, ServiceState.DISCONNECTED))
        tooltip = [label]
        if activity is not None and state is ServiceState.READY:
            self.jobs_action.setText(jobs_text(activity.running_jobs))
            tooltip.append(jobs_text(activity.running_jobs))
            if activity.has_error:
                tooltip.append("an error needs attention (see the window)")
        if activity is not None:
            self.jobs_action.setVisible(state is ServiceState.READY)
            self._refresh_engines(activity, ready=state is ServiceState.READY)
        self.icon.setToolTip("\n".join(tooltip))

    def _icon(self, state: ServiceState, status: OverallStatus) -> QIcon:
        key = (state, status)
        if key not in self._icons:
            self._icons[key] = status_icon(state, status)
        return self._icons[key]

    def _refresh_engines(self, activity: ActivityController, *, ready: bool) -> None:
        engines = activity.installed_engines if ready else []
        names = [engine.engine for engine in engines]
        if names != list(self.engine_actions):
            self._rebuild_engine_actions(engines)
        for engine in engines:
            action = self.engine_actions[engine.engine]
            busy = activity.is_busy(engine.engine)
            action.setText(engine_label(engine, busy))
            action.setChecked(is_on(engine))
            settled = engine.state not in ("starting", "stopping")
            action.setEnabled(not busy and settled and not (engine.adopted and is_on(engine)))
        self.engines_header.setVisible(ready)
        self._engines_separator.setVisible(ready)
        self.no_engines_action.setVisible(ready and not engines)

    def _rebuild_engine_actions(self, engines: list[EngineStatus]) -> None:
        for action in self.engine_actions.values():
            self.menu.removeAction(action)
            action.deleteLater()
        self.engine_actions = {}
        for engine in engines:
            action = QAction(engine.display_name, self.menu)
            action.setCheckable(True)
            action.triggered.connect(
                lambda checked, name=engine.engine: self._on_engine_action_triggered(name, checked)
            )
            self.menu.insertAction(self._engines_end, action)
            self.engine_actions[engine.engine] = action

    def _on_engine_action_triggered(self, engine: EngineName, checked: bool) -> None:
        if self._activity is not None:
            self._activity.set_engine_on(engine, checked)

    def _on_icon_activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason == QSystemTrayIcon.ActivationReason.Trigger:
            self.show_requested.emit()
