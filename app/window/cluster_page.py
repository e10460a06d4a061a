"""The Cluster page: this computer's identity, the cluster's name and members (remove, leave,
add), and LAN access with its API keys.

For the composition root::

    members, keys = MembersModel(), ApiKeysModel()
    controller = ClusterPageController(connection, members, keys, cluster_store,
                                       engines_store, discovery_store, settings_store)
    page = ClusterPage(connection, controller)
    page.add_node_requested.connect(...)  # open the Add node dialog

``ClusterPage(connection, controller, prompts=None, parent=None)``: ``prompts`` asks the
confirmations and the new key's name (``Prompts`` in ``app/window/cluster_dialogs.py``, with
the dialog that shows a new key's secret; tests pass their own). Signal
``add_node_requested()``: the user pressed "Add node…" (the page opens nothing itself). The
page reads the models through ``controller.members`` and ``controller.keys`` and calls only
controller methods.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.broker.connection import BrokerConnection
from app.broker.state import ServiceState
from app.controllers.cluster_page import ClusterPageController
from app.window.cluster_dialogs import Prompts
from app.window.cluster_members_box import ClusterBox
from app.window.cluster_parts import (
    INTRO,
    NOT_CONNECTED,
    IdentityBox,
    group_fingerprint,
)
from app.window.lan_access_box import LanAccessBox
from app.window.look import State
from app.window.network_privacy import (
    NetworkPrivacyBox,
)
from app.window.widgets import muted_label, page_layout, page_title, tint

__all__ = ["ClusterBox", "ClusterPage", "LanAccessBox", "group_fingerprint"]


class ClusterPage(QScrollArea):
    """The Cluster page (see the module docstring for its constructor and signal)."""

    add_node_requested = Signal()

    def __init__(
        self,
        connection: BrokerConnection,
        controller: ClusterPageController,
        prompts: Prompts | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._connection = connection
        self._controller = controller
        prompts = prompts or Prompts()
        self.connection_note = muted_label()
        self.problem = QLabel()
        self.problem.setWordWrap(True)
        tint(self.problem, State.ERROR)
        self.retry_button = QPushButton("Try again")
        self.retry_button.clicked.connect(controller.reload)
        self.loading = muted_label("Reading the cluster…")
        self.identity_box = IdentityBox()
        self.cluster_box = ClusterBox(controller, prompts)
        self.lan_box = LanAccessBox(controller, prompts)
        self.privacy_box = NetworkPrivacyBox(controller.privacy)
        self.cluster_box.add_node_requested.connect(self.add_node_requested)
        self._lay_out()
        controller.changed.connect(self.refresh)
        connection.state_changed.connect(self._on_connection_state_changed)
        self.refresh()

    def _lay_out(self) -> None:
        problem_row = QHBoxLayout()
        problem_row.addWidget(self.problem, 1)
        problem_row.addWidget(self.retry_button)
        body = QWidget()
        layout = page_layout(QVBoxLayout(body))
        layout.addWidget(page_title("Cluster"))
        layout.addWidget(muted_label(INTRO))
        layout.addWidget(self.connection_note)
        layout.addLayout(problem_row)
        layout.addWidget(self.loading)
        for box in (self.identity_box, self.cluster_box, self.lan_box, self.privacy_box):
            layout.addWidget(box)
        layout.addStretch(1)
        self.setWidget(body)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)

    def refresh(self) -> None:
        """Show what the controller knows now."""
        state = self._connection.state
        ready = state is ServiceState.READY
        status = self._controller.status
        self.connection_note.setText(NOT_CONNECTED.get(state, ""))
        self.connection_note.setVisible(not ready)
        problem = self._controller.cluster_error if ready and status is None else None
        self.problem.setText(f"Could not read the cluster: {problem}" if problem else "")
        self.problem.setVisible(problem is not None)
        self.retry_button.setVisible(problem is not None)
        self.loading.setVisible(ready and status is None and problem is None)
        self.identity_box.setVisible(status is not None)
        self.cluster_box.setVisible(status is not None)
        self.lan_box.setVisible(ready)
        self.privacy_box.setVisible(ready)
        if status is not None:
            self.identity_box.set_status(status)
        self.cluster_box.refresh(ready)
        self.lan_box.refresh(ready)
        self.privacy_box.refresh(ready)

    def showEvent(self, event: QShowEvent) -> None:
        """Read the keys again whenever the page is shown (another window may have changed
        them: keys are not pushed)."""
        super().showEvent(event)
        self._controller.reload_keys()

    def _on_connection_state_changed(self, _state: ServiceState) -> None:
        self.refresh()
