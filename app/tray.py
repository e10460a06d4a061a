"""The tray icon: the service state at a glance, and Show / Start / Quit."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from app.broker.connection import BrokerConnection
from app.broker.state import ServiceState
from app.controllers.service import ServiceController
from app.icons import state_icon
from app.window.look import STATE_LOOKS


def tray_available() -> bool:
    """Whether the desktop has a system tray (offscreen and some Wayland sessions do not)."""
    return QSystemTrayIcon.isSystemTrayAvailable()


class Tray(QObject):
    """Owns the tray icon and its menu; reflects the connection's state in icon and tooltip."""

    show_requested = Signal()
    quit_requested = Signal()

    def __init__(
        self,
        connection: BrokerConnection,
        service: ServiceController,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._connection = connection
        self.menu = QMenu()
        self.status_action = QAction(self.menu)
        self.status_action.setEnabled(False)
        self.show_action = QAction("Show PAIR", self.menu)
        self.start_action = QAction("Start service", self.menu)
        self.quit_action = QAction("Quit PAIR", self.menu)
        self.menu.addAction(self.status_action)
        self.menu.addSeparator()
        for action in (self.show_action, self.start_action):
            self.menu.addAction(action)
        self.menu.addSeparator()
        self.menu.addAction(self.quit_action)
        self.icon = QSystemTrayIcon(self)
        self.icon.setContextMenu(self.menu)
        self.show_action.triggered.connect(self.show_requested)
        self.start_action.triggered.connect(service.start_service)
        self.quit_action.triggered.connect(self.quit_requested)
        self.icon.activated.connect(self._on_icon_activated)
        connection.state_changed.connect(self._on_connection_state_changed)
        self._on_connection_state_changed(connection.state)

    def show(self) -> None:
        """Put the icon in the tray."""
        self.icon.show()

    def hide(self) -> None:
        """Take the icon out of the tray."""
        self.icon.hide()

    def _on_connection_state_changed(self, state: ServiceState) -> None:
        label = f"PAIR service: {STATE_LOOKS[state].label}"
        self.icon.setIcon(state_icon(state))
        self.icon.setToolTip(label)
        self.status_action.setText(label)
        self.start_action.setVisible(state in (ServiceState.FAILED, ServiceState.DISCONNECTED))

    def _on_icon_activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason == QSystemTrayIcon.ActivationReason.Trigger:
            self.show_requested.emit()
