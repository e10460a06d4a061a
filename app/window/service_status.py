"""The Service box: state, owned or attached, PID, uptime, and the Start/Restart buttons."""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QGroupBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.broker.connection import BrokerConnection
from app.broker.state import Ownership, ServiceState
from app.controllers.service import ServiceController
from app.window.indicator import StateDot
from app.window.look import STATE_LOOKS, describe, format_duration
from app.window.widgets import muted_label

RESTART_TIP = "Stop the PAIR service this app started and start it again."
RECONNECT_TIP = (
    "This service was started outside this app (pair node, a system service or another "
    "window), so the app does not stop it. Reconnect drops the connection and attaches again, "
    "re-reading everything."
)
START_TIP = "Start the PAIR service from this app (it attaches instead if one is running)."
DEMO_NOTE = "pair demo started this service; quitting the app ends the demo and stops it."


class ServiceStatusBox(QGroupBox):
    """Shows the connection's state and facts; Start and Restart call the service controller."""

    def __init__(
        self,
        connection: BrokerConnection,
        controller: ServiceController,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__("Service", parent)
        self._connection = connection
        self._controller = controller
        self.dot = StateDot(14)
        self.state_label = QLabel()
        self.details = QLabel()
        self.restart_button = QPushButton("Restart")
        self.start_button = QPushButton("Start")
        self.start_button.setToolTip(START_TIP)
        self.description = muted_label()
        self.failure = QLabel()
        self.failure.setWordWrap(True)
        self.failure.setStyleSheet("color: #c62828;")
        self._lay_out()
        self.restart_button.clicked.connect(controller.restart_service)
        self.start_button.clicked.connect(controller.start_service)
        connection.state_changed.connect(self._on_connection_state_changed)
        connection.session_changed.connect(self.refresh)
        controller.info_changed.connect(self.refresh)
        self._ticker = QTimer(self)
        self._ticker.setInterval(1000)
        self._ticker.timeout.connect(self._on_ticker_timeout)
        self._ticker.start()
        self.refresh()

    def _lay_out(self) -> None:
        top = QHBoxLayout()
        top.setSpacing(8)
        top.addWidget(self.dot)
        top.addWidget(self.state_label)
        top.addSpacing(8)
        top.addWidget(self.details, 1)
        top.addWidget(self.start_button)
        top.addWidget(self.restart_button)
        layout = QVBoxLayout(self)
        layout.setSpacing(6)
        layout.addLayout(top)
        layout.addWidget(self.description)
        layout.addWidget(self.failure)

    def refresh(self) -> None:
        """Re-read the connection and controller and update every label and button."""
        state = self._connection.state
        ownership = self._connection.ownership
        self.dot.set_state(state)
        self.state_label.setText(f"<b>{STATE_LOOKS[state].label}</b>")
        self.details.setText(self._details_text(ownership))
        demo = self._controller.demo and state is ServiceState.READY
        self.description.setText(DEMO_NOTE if demo else describe(state, ownership))
        down = state in (ServiceState.FAILED, ServiceState.DISCONNECTED)
        self.failure.setText(self._connection.failure_message if down else "")
        self.failure.setVisible(down and bool(self._connection.failure_message))
        self.start_button.setVisible(down)
        self.restart_button.setVisible(not down)
        self.restart_button.setEnabled(ownership is not None)
        attached = ownership is Ownership.ATTACHED
        self.restart_button.setText("Reconnect" if attached else "Restart")
        self.restart_button.setToolTip(RECONNECT_TIP if attached else RESTART_TIP)

    def _details_text(self, ownership: Ownership | None) -> str:
        if ownership is None:
            return ""
        parts = ["Owned by this app" if ownership is Ownership.OWNED else "Attached"]
        pid = self._connection.pid or self._controller.info.pid
        if pid is not None:
            parts.append(f"PID {pid}")
        uptime = self._controller.info.uptime_s(time.monotonic())
        if uptime is not None and self._connection.state is ServiceState.READY:
            parts.append(f"up {format_duration(uptime)}")
        return " · ".join(parts)

    def _on_connection_state_changed(self, _state: ServiceState) -> None:
        self.refresh()

    def _on_ticker_timeout(self) -> None:
        if self._connection.state is ServiceState.READY:
            self.details.setText(self._details_text(self._connection.ownership))
