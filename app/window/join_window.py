"""The Cluster page's "Join a cluster…" row: this computer takes invites only while its user
asked to join, for 10 minutes; the row opens that window, then shows the time left, where the
other computer should invite this one, and a way to stop sooner."""

from __future__ import annotations

import math

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.controllers.cluster_page import ClusterPageController
from app.window.widgets import muted_label
from backend.protocol.types.cluster import JoinWindow

JOIN_HINT = "Join a cluster… lets another computer invite this one for the next 10 minutes."
TICK_MS = 1000


def time_left_text(window: JoinWindow, now: float) -> str:
    """``9:41``: how long invites are still taken (a part of a second counts as a second)."""
    minutes, seconds = divmod(max(0, math.ceil(window.closes_at - now)), 60)
    return f"{minutes}:{seconds:02d}"


def open_text(window: JoinWindow, now: float, address: str) -> str:
    """What the row says while the window is open."""
    return (
        f"This computer accepts invites for {time_left_text(window, now)} more. On the other "
        f"computer, choose Add node… and enter this computer's address: {address}. The "
        "invite then appears here; type the PIN it shows."
    )


class JoinWindowRow(QWidget):
    """ "Join a cluster…", or while the window is open, the time left and "Stop accepting".
    Owns the one-second timer that runs only while the window is open."""

    def __init__(self, controller: ClusterPageController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self.join_button = QPushButton("Join a cluster…")
        self.join_button.setToolTip("Let another computer invite this one (10 minutes)")
        self.hint = muted_label(JOIN_HINT)
        self.state = QLabel()
        self.state.setWordWrap(True)
        self.stop_button = QPushButton("Stop accepting")
        self.problem = muted_label()
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self._on_timer_timeout)
        self.join_button.clicked.connect(self._on_join_button_clicked)
        self.stop_button.clicked.connect(self._on_stop_button_clicked)
        controller.join_failed.connect(self._on_controller_join_failed)
        self._lay_out()
        self._ready = False

    def _lay_out(self) -> None:
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.join_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for label in (self.hint, self.state, self.problem):
            label.setAlignment(Qt.AlignmentFlag.AlignCenter)  # as the rest of the empty state
            layout.addWidget(label)
        layout.addLayout(buttons)
        self.problem.hide()

    def refresh(self, ready: bool) -> None:
        """Show the window as the controller has it; the buttons work only while ``ready``."""
        self._ready = ready
        window = self._controller.join_window
        self.join_button.setVisible(window is None)
        self.hint.setVisible(window is None)
        self.state.setVisible(window is not None)
        self.stop_button.setVisible(window is not None)
        self.join_button.setEnabled(ready)
        self.stop_button.setEnabled(ready)
        if window is None:
            self._timer.stop()
            return
        self.problem.hide()
        address = self._controller.join_address()
        self.state.setText(open_text(window, self._controller.now(), address))
        if not self._timer.isActive():
            self._timer.start()

    def _on_timer_timeout(self) -> None:
        self.refresh(self._ready)

    def _on_join_button_clicked(self) -> None:
        self.problem.hide()
        self._controller.open_join_window()

    def _on_stop_button_clicked(self) -> None:
        self._controller.close_join_window()

    def _on_controller_join_failed(self, message: str) -> None:
        self.problem.setText(message)
        self.problem.show()
