"""The Add node dialog: the PAIR computers found on this network that could join this cluster,
each with Invite, and a field to add one by address or host name (checked as you type, then
probed with Check before Invite). Inviting shows the PIN panel in the dialog.

To open it (one dialog per window, kept and shown again; it cancels an invite still open when
it is closed)::

    controller = AddNodeController(connection, stores.discovery, stores.cluster, parent=window)
    dialog = AddNodeDialog(controller, parent=window)
    dialog.show()  # later clicks: dialog.show(); dialog.raise_(); dialog.activateWindow()

Close the controller with the other controllers (``await controller.close()``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette, QShowEvent
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.address import Address, Invalid, parse_address
from app.controllers.add_node import AddNodeController, Candidate, ProbeResult
from app.window.look import State
from app.window.pin_panel import PinPanel
from app.window.widgets import (
    DIALOG_MARGINS,
    SPACE_SECTION,
    SPACE_TIGHT,
    muted_label,
    page_title,
    tint,
)
from backend.protocol.types.base import NodeId
from backend.protocol.types.cluster import InviteCreated

INTRO = (
    "Invite another computer that runs PAIR. First, on that computer, choose Join a cluster… "
    "on its Cluster page (or run pair join): it takes invites only then. This window then "
    "shows a six-digit PIN, and you type it on that computer."
)
NONE_FOUND = (
    "No other PAIR computer found on this network yet. PAIR has to be running on it; "
    "on another network or over a VPN, add it by address below."
)
ADDRESS_HINT = "An IP address or a host name, with :port when it is not 14320."
PLACEHOLDER = "192.168.1.20, gpu-box.local or [fd7a::5]:14320"


def candidate_details(candidate: Candidate) -> str:
    """``192.168.1.20 · PAIR 0.1.0 · Linux · 24 GB GPU`` from what is known."""
    version = f"PAIR {candidate.version}" if candidate.version else None
    parts = (candidate.address.host, version, candidate.system, candidate.gpu)
    return " · ".join(part for part in parts if part)


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


class CandidateRow(QWidget):
    """One computer: name, what is known about it, and Invite (or why not)."""

    def __init__(self, candidate: Candidate, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.candidate = candidate
        self.name_label = QLabel(f"<b>{_escaped(candidate.name)}</b>")
        self.details_label = muted_label(candidate_details(candidate))
        self.invite_button = QPushButton("Invite")
        self.note_label = muted_label()
        if candidate.in_other_cluster:
            self.note_label.setText("In another cluster")
        elif not candidate.reachable:
            self.note_label.setText("Not answering")
        self.invite_button.setVisible(candidate.invitable)
        self.note_label.setVisible(not candidate.invitable)
        text = QVBoxLayout()
        text.setSpacing(2)
        text.addWidget(self.name_label)
        text.addWidget(self.details_label)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, SPACE_TIGHT, 0, SPACE_TIGHT)
        layout.addLayout(text, 1)
        layout.addWidget(self.note_label, 0, Qt.AlignmentFlag.AlignVCenter)
        layout.addWidget(self.invite_button, 0, Qt.AlignmentFlag.AlignVCenter)


def _escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class AddNodeDialog(QDialog):
    """Choose a computer, invite it, then show its PIN panel until the invite ends.
    ``clock`` (wall time) drives the PIN panel's countdown."""

    def __init__(
        self,
        controller: AddNodeController,
        parent: QWidget | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Add a computer")
        self.setMinimumWidth(560)
        self.controller = controller
        self.rows: dict[NodeId, CandidateRow] = {}
        self._checked: ProbeResult | None = None  # the last probe of the typed address
        self._invited: tuple[Address, str, bool] | None = None  # address, name, typed
        self.panel = PinPanel(controller, clock=clock)
        self.stack = QStackedWidget()
        self.stack.addWidget(self._chooser())
        self.stack.addWidget(self.panel)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(*DIALOG_MARGINS)
        layout.addWidget(self.stack, 1)
        layout.addWidget(self.buttons)
        self._follow_controller()
        self._on_controller_candidates_changed()
        self._on_address_text_changed("")

    def _chooser(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(SPACE_SECTION)
        layout.addWidget(page_title("Add a computer"))
        layout.addWidget(muted_label(INTRO))
        found = QGroupBox("On this network")
        self._rows_layout = QVBoxLayout(found)
        self.none_found = muted_label(NONE_FOUND)
        self._rows_layout.addWidget(self.none_found)
        self.list_message = self._message_label()
        self._rows_layout.addWidget(self.list_message)
        layout.addWidget(found)
        layout.addWidget(self._by_address())
        layout.addStretch(1)
        return page

    def _by_address(self) -> QGroupBox:
        box = QGroupBox("Add by address or host name")
        self.address_field = QLineEdit()
        self.address_field.setPlaceholderText(PLACEHOLDER)
        self.address_field.setClearButtonEnabled(True)
        self.address_field.textChanged.connect(self._on_address_text_changed)
        self.address_field.returnPressed.connect(self._on_address_return_pressed)
        self.check_button = QPushButton("Check")
        self.check_button.clicked.connect(self._on_check_button_clicked)
        self.address_invite_button = QPushButton("Invite")
        self.address_invite_button.clicked.connect(self._on_address_invite_button_clicked)
        self.address_message = self._message_label()
        grid = QGridLayout(box)
        grid.addWidget(self.address_field, 0, 0)
        grid.addWidget(self.check_button, 0, 1)
        grid.addWidget(self.address_invite_button, 0, 2)
        grid.addWidget(self.address_message, 1, 0, 1, 3)
        grid.setColumnStretch(0, 1)
        return box

    @staticmethod
    def _message_label() -> QLabel:
        label = QLabel()
        label.setWordWrap(True)
        label.setTextFormat(Qt.TextFormat.PlainText)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        label.hide()  # an empty label still takes a line
        return label

    def _follow_controller(self) -> None:
        controller = self.controller
        controller.candidates_changed.connect(self._on_controller_candidates_changed)
        controller.probed.connect(self._on_controller_probed)
        controller.invite_created.connect(self._on_controller_invite_created)
        controller.invite_failed.connect(self._on_controller_invite_failed)
        self.panel.close_requested.connect(self.accept)
        self.panel.invite_again_requested.connect(self._on_panel_invite_again_requested)

    # Showing and closing ---------------------------------------------------------------------

    def showEvent(self, event: QShowEvent) -> None:
        """Opened again after an invite ended: back to choosing a computer."""
        super().showEvent(event)
        if self.stack.currentWidget() is self.panel and not self.panel.open:
            self._show_chooser()

    def done(self, result: int) -> None:
        """Closing the dialog cancels an invite still open: it would block new ones for minutes."""
        if self.stack.currentWidget() is self.panel and self.panel.open:
            self.panel.cancel()
            self._show_chooser()
        super().done(result)

    def _show_chooser(self) -> None:
        self.stack.setCurrentIndex(0)
        self.buttons.show()

    # The list --------------------------------------------------------------------------------

    def _on_controller_candidates_changed(self) -> None:
        for row in self.rows.values():
            self._rows_layout.removeWidget(row)
            row.deleteLater()
        self.rows = {}
        candidates = self.controller.candidates
        for position, candidate in enumerate(candidates):
            row = CandidateRow(candidate)
            row.invite_button.clicked.connect(lambda _=False, c=candidate: self._invite_row(c))
            self._rows_layout.insertWidget(position, row)
            self.rows[candidate.node_id] = row
        self.none_found.setVisible(not candidates)

    def _invite_row(self, candidate: Candidate) -> None:
        self._start_invite(candidate.address, candidate.name, typed=False)

    # By address ------------------------------------------------------------------------------

    def _typed(self) -> Address | Invalid:
        return parse_address(self.address_field.text())

    def _on_address_text_changed(self, _text: str) -> None:
        self._checked = None
        parsed = self._typed()
        self.check_button.setEnabled(isinstance(parsed, Address))
        self.address_invite_button.setEnabled(False)
        if isinstance(parsed, Address):
            self._say(self.address_message, f"Check asks who answers at {parsed}.", None)
        elif not self.address_field.text().strip():
            self._say(self.address_message, ADDRESS_HINT, None)
        elif parsed.incomplete:
            self._say(self.address_message, _capitalised(parsed.message) + "…", None)
        else:
            self._say(self.address_message, _capitalised(parsed.message) + ".", State.ERROR)

    def _on_address_return_pressed(self) -> None:
        if self.address_invite_button.isEnabled():
            self._on_address_invite_button_clicked()
        elif self.check_button.isEnabled():
            self._on_check_button_clicked()

    def _on_check_button_clicked(self) -> None:
        parsed = self._typed()
        if isinstance(parsed, Address):
            self._checked = None
            self.address_invite_button.setEnabled(False)
            self._say(self.address_message, f"Checking {parsed}…", None)
            self.controller.probe(parsed)

    def _on_controller_probed(self, result: ProbeResult) -> None:
        if result.address != self._typed():
            return  # the text changed since: this answer is for another address
        self._checked = result
        state = State.OK if result.invitable else State.ERROR
        self._say(self.address_message, result.message, state)
        self.address_invite_button.setEnabled(result.invitable and not self.controller.inviting)

    def _on_address_invite_button_clicked(self) -> None:
        checked = self._checked
        if checked is None or not checked.invitable:
            return
        name = checked.probe.info.name if checked.probe else str(checked.address)
        self._start_invite(checked.address, name, typed=True)

    # Inviting --------------------------------------------------------------------------------

    def _start_invite(self, address: Address, name: str, *, typed: bool) -> None:
        if self.controller.inviting:
            return
        self._invited = (address, name, typed)
        self._say(self.list_message, "", None)
        self.panel.show_inviting(name)
        self.stack.setCurrentWidget(self.panel)
        self.buttons.hide()
        self.controller.invite(address)

    def _on_panel_invite_again_requested(self) -> None:
        if self._invited is not None:
            address, name, typed = self._invited
            self._start_invite(address, name, typed=typed)

    def _on_controller_invite_created(self, created: InviteCreated) -> None:
        self.panel.show_invite(created)

    def _on_controller_invite_failed(self, message: str) -> None:
        self._show_chooser()
        typed = self._invited is not None and self._invited[2]
        self._say(self.address_message if typed else self.list_message, message, State.ERROR)

    @staticmethod
    def _say(label: QLabel, text: str, state: State | None) -> None:
        label.setText(text)
        label.setVisible(bool(text))
        # Advice in the secondary text colour; outcomes (good or bad) in their state's.
        tint(label, state)
        label.setForegroundRole(
            QPalette.ColorRole.PlaceholderText if state is None else QPalette.ColorRole.WindowText
        )
