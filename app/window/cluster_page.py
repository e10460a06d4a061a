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

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtGui import QKeyEvent, QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.broker.connection import BrokerConnection
from app.broker.state import ServiceState
from app.controllers.cluster_page import ClusterPageController, NewKey
from app.fingerprint import grouped
from app.models.errors import SEVERITY_COLOURS
from app.models.keyed_table import ROW_ROLE
from app.models.members import MemberRow, day_text
from app.window.cluster_dialogs import Prompts, SecretDialog
from app.window.join_window import JoinWindowRow
from app.window.network_privacy import (
    PUBLIC_LAN_REASON,
    NetworkPrivacyBox,
    lan_switch_shown,
    reason_label,
)
from app.window.settings_general import error_label, show_error
from app.window.widgets import FittedTable, copy_to_clipboard, fixed_font, muted_label, page_title
from backend.protocol.types.apikeys import ApiKeyInfo
from backend.protocol.types.cluster import ClusterStatus

INTRO = (
    "Computers in one cluster share their engines and models: a request sent to any of them "
    "runs on the one that has the model."
)
NOT_CONNECTED = {
    ServiceState.CONNECTING: "Connecting to the PAIR service…",
    ServiceState.DISCONNECTED: "Disconnected from the PAIR service: the cluster cannot be "
    "shown or changed until it is back.",
    ServiceState.FAILED: "The PAIR service is not running: the cluster cannot be shown or "
    "changed. Start it from Settings → Service.",
}
EMPTY_HEADLINE = "Not in a cluster yet"
EMPTY_MESSAGE = "Add node… to invite another computer."
NO_MEMBERS = "No other computers are in this cluster. Add node… invites one."
KEY_PROTECTION = {
    "keyring": "Its private key is encrypted; the passphrase is kept in the system keyring.",
    "file": "Its private key is a plain file only your user can read (this system has no "
    "keyring to encrypt it with).",
}
LAN_NOTE = (
    "Other computers on your network may then send requests to this computer's front doors, "
    "each with a key from the list below. This computer needs no key."
)
NO_KEYS = "No keys yet: create one for each computer or app that should get in."


def group_fingerprint(fingerprint: str) -> str:
    """``sha256:ab12…`` as two lines of eight groups of four hex digits."""
    return grouped(fingerprint, per_line=8)


def remove_text(name: str) -> str:
    """What removing a member does, said before it is done."""
    return (
        f"{name} is removed for good: its certificate can never rejoin this cluster; it is "
        "told to leave. Its jobs stay in the history."
    )


def leave_text(status: ClusterStatus) -> str:
    """What leaving does to this computer, said before it is done."""
    cluster = status.cluster_name or "the cluster"
    return (
        f"This computer tells the other members of {cluster} it is leaving, then forgets the "
        "certificates it pinned for them: requests no longer go between them and this "
        "computer, and its jobs stay in the history.\n\nTo come back, a member sends this "
        "computer a new invite (Add node… on that computer)."
    )


def revoke_text(key: ApiKeyInfo) -> str:
    """What revoking a key does."""
    return (
        f"Whatever uses the key {key.name} ({key.prefix}…) is refused from now on. This cannot "
        "be undone: create a new key to let it in again."
    )


class NameEdit(QLineEdit):
    """The cluster name, edited in place: Enter saves (``returnPressed``), Esc goes back to
    the saved name."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.saved = ""
        self.setMaxLength(64)
        self.setFixedWidth(280)
        self.setToolTip("The cluster's name, the same on every member. Enter saves it.")

    def set_saved(self, name: str) -> None:
        """The name the broker has; shown unless the user is changing it."""
        editing = self.text() != self.saved
        self.saved = name
        if not editing:
            self.setText(name)

    def revert(self) -> None:
        """Show the saved name again."""
        self.setText(self.saved)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        """Esc reverts; everything else as a line edit."""
        if event.key() == Qt.Key.Key_Escape and self.text() != self.saved:
            self.revert()
            event.accept()
            return
        super().keyPressEvent(event)


class IdentityBox(QGroupBox):
    """This computer's certificate fingerprint (copyable) and how its key is kept."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("This computer", parent)
        self.fingerprint = QLabel()
        self.fingerprint.setFont(fixed_font())
        self.fingerprint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the whole fingerprint (sha256:…)")
        self.copy_button.clicked.connect(self._on_copy_button_clicked)
        self.protection = muted_label()
        self._full = ""
        layout = QVBoxLayout(self)
        layout.addWidget(
            muted_label(
                "Certificate fingerprint (SHA-256): compare it with what "
                "another computer shows for this one while pairing."
            )
        )
        row = QHBoxLayout()
        row.addWidget(self.fingerprint)
        row.addWidget(self.copy_button, 0, Qt.AlignmentFlag.AlignTop)
        row.addStretch(1)
        layout.addLayout(row)
        layout.addWidget(self.protection)

    def set_status(self, status: ClusterStatus) -> None:
        """Show ``status``'s identity."""
        self._full = status.fingerprint
        self.fingerprint.setText(group_fingerprint(status.fingerprint))
        self.protection.setText(KEY_PROTECTION.get(status.key_protection, ""))

    def _on_copy_button_clicked(self) -> None:
        copy_to_clipboard(self._full, self.copy_button)


class Notice(QLabel):
    """A line under a section's buttons: what a command did, or (in red) why it failed."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.hide()

    def say(self, text: str) -> None:
        """Show an outcome."""
        self.setStyleSheet("")
        self.setText(text)
        self.setVisible(bool(text))

    def warn(self, text: str) -> None:
        """Show a failure."""
        self.setStyleSheet(f"color: {SEVERITY_COLOURS['error'].name()};")
        self.setText(text)
        self.setVisible(bool(text))


def selected_row(table: QTableView) -> object:
    """The row value (``ROW_ROLE``) of the selected row, or None."""
    selection = table.selectionModel()
    rows = selection.selectedRows() if selection is not None else []
    return rows[0].data(ROW_ROLE) if rows else None


class EmptyState(QWidget):
    """Not in a cluster: what that means and the ways in (Add node…, Join a cluster…)."""

    add_node_requested = Signal()

    def __init__(self, join_row: QWidget | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.headline = QLabel(EMPTY_HEADLINE)
        font = self.headline.font()
        font.setPointSizeF(font.pointSizeF() * 1.25)
        font.setBold(True)
        self.headline.setFont(font)
        self.message = muted_label(EMPTY_MESSAGE)
        self.removed_note = muted_label()
        self.add_button = QPushButton("Add node…")
        self.add_button.clicked.connect(self.add_node_requested)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 12, 0, 12)
        for widget in (self.headline, self.message, self.removed_note):
            widget.setAlignment(Qt.AlignmentFlag.AlignCenter)
            layout.addWidget(widget)
        layout.addSpacing(6)
        layout.addWidget(self.add_button, 0, Qt.AlignmentFlag.AlignCenter)
        if join_row is not None:
            layout.addSpacing(6)
            layout.addWidget(join_row)

    def set_status(self, status: ClusterStatus) -> None:
        """Say so when another member removed this computer."""
        removed = status.removed
        if removed is None:
            self.removed_note.hide()
            return
        self.removed_note.setText(
            f"{removed.by_name} removed this computer from {removed.cluster_name or 'its cluster'}"
            f" on {day_text(removed.at)}. That cluster does not take this computer back."
        )
        self.removed_note.show()


class ClusterBox(QGroupBox):
    """The cluster's name (edited in place), its members, and Add node, Remove and Leave."""

    add_node_requested = Signal()

    def __init__(
        self, controller: ClusterPageController, prompts: Prompts, parent: QWidget | None = None
    ) -> None:
        super().__init__("Members", parent)
        self._controller = controller
        self._prompts = prompts
        self.name_edit = NameEdit()
        self.name_hint = muted_label("Enter saves · Esc goes back")
        self.name_error = error_label()
        self.table = FittedTable(controller.members, stretch=3, minimum_rows=2, maximum_rows=8)
        self.no_members = muted_label(NO_MEMBERS)
        self.add_button = QPushButton("Add node…")
        self.remove_button = QPushButton("Remove…")
        self.remove_button.setToolTip("Remove the member selected in the table")
        self.leave_button = QPushButton("Leave cluster…")
        self.notice = Notice()
        self.join_row = JoinWindowRow(controller)
        self.empty = EmptyState(self.join_row)
        self._lay_out()
        self._connect()

    def _lay_out(self) -> None:
        self.cluster_part = QWidget()
        part = QVBoxLayout(self.cluster_part)
        part.setContentsMargins(0, 0, 0, 0)
        name_row = QHBoxLayout()
        name_row.addWidget(QLabel("Cluster name"))
        name_row.addWidget(self.name_edit)
        name_row.addWidget(self.name_hint)
        name_row.addStretch(1)
        part.addLayout(name_row)
        part.addWidget(self.name_error)
        part.addSpacing(4)
        part.addWidget(self.table)
        part.addWidget(self.no_members)
        buttons = QHBoxLayout()
        for button in (self.add_button, self.remove_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(self.leave_button)
        part.addLayout(buttons)
        layout = QVBoxLayout(self)
        layout.addWidget(self.cluster_part)
        layout.addWidget(self.empty)
        layout.addWidget(self.notice)

    def _connect(self) -> None:
        controller = self._controller
        self.name_edit.textChanged.connect(self._on_name_edit_text_changed)
        self.name_edit.returnPressed.connect(self._on_name_edit_return_pressed)
        self.add_button.clicked.connect(self.add_node_requested)
        self.empty.add_node_requested.connect(self.add_node_requested)
        self.remove_button.clicked.connect(self._on_remove_button_clicked)
        self.leave_button.clicked.connect(self._on_leave_button_clicked)
        self.table.selectionModel().selectionChanged.connect(self._on_table_selection_changed)
        members = controller.members
        for signal in (members.rowsInserted, members.rowsRemoved, members.modelReset,
                       members.dataChanged):  # fmt: skip
            signal.connect(self._on_members_rows_changed)
        controller.renamed.connect(self._on_controller_renamed)
        controller.rename_failed.connect(self._on_controller_rename_failed)
        controller.membership_done.connect(self.notice.say)
        controller.membership_failed.connect(self.notice.warn)

    def refresh(self, ready: bool) -> None:
        """Show the cluster as the controller has it; commands only while ``ready``."""
        status = self._controller.status
        in_cluster = self._controller.in_cluster
        self.cluster_part.setVisible(in_cluster)
        self.empty.setVisible(status is not None and not in_cluster)
        if status is not None:
            self.name_edit.set_saved(status.cluster_name)
            self.empty.set_status(status)
        self.name_edit.setReadOnly(not ready or self._controller.renaming)
        for button in (self.add_button, self.leave_button, self.empty.add_button):
            button.setEnabled(ready)
        self.join_row.refresh(ready)
        self._on_members_rows_changed()
        self._on_name_edit_text_changed(self.name_edit.text())

    def _on_members_rows_changed(self, *_args: object) -> None:
        empty = self._controller.members.rowCount() == 0
        self.table.setVisible(not empty)
        self.no_members.setVisible(empty)
        self.table.fit()
        self._on_table_selection_changed()

    def _on_table_selection_changed(self, *_args: object) -> None:
        self.remove_button.setEnabled(
            self.leave_button.isEnabled() and isinstance(selected_row(self.table), MemberRow)
        )

    def _on_name_edit_text_changed(self, text: str) -> None:
        self.name_hint.setVisible(text != self.name_edit.saved)

    def _on_name_edit_return_pressed(self) -> None:
        show_error(self.name_error, "")
        self.name_edit.setReadOnly(True)
        self._controller.rename(self.name_edit.text())

    def _on_controller_renamed(self, name: str) -> None:
        self.name_edit.saved = name
        self.name_edit.setText(name)
        self.name_edit.setReadOnly(False)
        show_error(self.name_error, "")

    def _on_controller_rename_failed(self, message: str) -> None:
        self.name_edit.setReadOnly(False)
        show_error(self.name_error, message)

    def _on_remove_button_clicked(self) -> None:
        row = selected_row(self.table)
        if not isinstance(row, MemberRow):
            return
        if self._prompts.confirm(self, f"Remove {row.name}?", remove_text(row.name), "Remove"):
            self.notice.say(f"Removing {row.name}…")
            self._controller.remove_member(row.node_id)

    def _on_leave_button_clicked(self) -> None:
        status = self._controller.status
        if status is None:
            return
        title = f"Leave {status.cluster_name or 'the cluster'}?"
        if self._prompts.confirm(self, title, leave_text(status), "Leave cluster"):
            self.notice.say("Leaving the cluster…")
            self._controller.leave()


class LanAccessBox(QGroupBox):
    """The ``lan_access`` switch and the LAN API keys: create (secret shown once), revoke."""

    def __init__(
        self, controller: ClusterPageController, prompts: Prompts, parent: QWidget | None = None
    ) -> None:
        super().__init__("LAN access", parent)
        self._controller = controller
        self._prompts = prompts
        self.secret_dialog: SecretDialog | None = None
        self.switch = QCheckBox("Let other computers use this computer's front doors")
        self.switch_error = error_label()
        self.public_reason = reason_label(PUBLIC_LAN_REASON)
        self.table = FittedTable(controller.keys, stretch=2, minimum_rows=1, maximum_rows=6)
        self.no_keys = muted_label(NO_KEYS)
        self.create_button = QPushButton("Create key…")
        self.revoke_button = QPushButton("Revoke…")
        self.revoke_button.setToolTip("Revoke the key selected in the table")
        self.notice = Notice()
        layout = QVBoxLayout(self)
        layout.addWidget(self.switch)
        note = QVBoxLayout()
        note.setContentsMargins(self.switch_indent(), 0, 0, 0)
        note.addWidget(self.public_reason)
        note.addWidget(muted_label(LAN_NOTE))
        note.addWidget(self.switch_error)
        layout.addLayout(note)
        layout.addSpacing(4)
        layout.addWidget(self.table)
        layout.addWidget(self.no_keys)
        buttons = QHBoxLayout()
        buttons.addWidget(self.create_button)
        buttons.addWidget(self.revoke_button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
        layout.addWidget(self.notice)
        self._connect()

    def _connect(self) -> None:
        controller = self._controller
        self.switch.toggled.connect(self._on_switch_toggled)
        self.create_button.clicked.connect(self._on_create_button_clicked)
        self.revoke_button.clicked.connect(self._on_revoke_button_clicked)
        self.table.selectionModel().selectionChanged.connect(self._on_table_selection_changed)
        for signal in (controller.keys.rowsInserted, controller.keys.rowsRemoved,
                       controller.keys.modelReset):  # fmt: skip
            signal.connect(self._on_keys_rows_changed)
        controller.lan_access_failed.connect(self._on_controller_lan_access_failed)
        controller.key_created.connect(self._on_controller_key_created)
        controller.key_revoked.connect(self._on_controller_key_revoked)
        controller.keys_failed.connect(self.notice.warn)

    def switch_indent(self) -> int:
        """Where the switch's text starts, to line its note up under it."""
        style = self.switch.style()
        indicator = style.pixelMetric(style.PixelMetric.PM_IndicatorWidth)
        spacing = style.pixelMetric(style.PixelMetric.PM_CheckBoxLabelSpacing)
        return indicator + spacing

    def refresh(self, ready: bool) -> None:
        """Show the saved ``lan_access``; commands only while ``ready``."""
        public = self._controller.privacy.public_network
        checked, changeable = lan_switch_shown(self._controller.lan_access, public)
        with QSignalBlocker(self.switch):
            self.switch.setChecked(checked)
        self.switch.setEnabled(ready and changeable)
        self.public_reason.setVisible(public)
        self.create_button.setEnabled(ready)
        self._on_keys_rows_changed()

    def _on_keys_rows_changed(self, *_args: object) -> None:
        empty = self._controller.keys.rowCount() == 0
        self.table.setVisible(not empty)
        self.no_keys.setVisible(empty)
        self.table.fit()
        self._on_table_selection_changed()

    def _on_table_selection_changed(self, *_args: object) -> None:
        key = selected_row(self.table)
        self.revoke_button.setEnabled(self.create_button.isEnabled() and key is not None)

    def _on_switch_toggled(self, on: bool) -> None:
        show_error(self.switch_error, "")
        self._controller.set_lan_access(on)

    def _on_controller_lan_access_failed(self, message: str) -> None:
        show_error(self.switch_error, message)

    def _on_create_button_clicked(self) -> None:
        name = self._prompts.key_name(self)
        if name is not None:
            self.notice.say(f"Creating the key {name}…")
            self._controller.create_key(name)

    def _on_revoke_button_clicked(self) -> None:
        key = selected_row(self.table)
        if not isinstance(key, ApiKeyInfo):
            return
        if self._prompts.confirm(self, f"Revoke {key.name}?", revoke_text(key), "Revoke"):
            self._controller.revoke_key(key.id)

    def _on_controller_key_created(self, key: NewKey) -> None:
        self.notice.say(f"Created the key {key.info.name}.")
        dialog = self.secret_dialog = SecretDialog(key, self)
        dialog.finished.connect(self._on_secret_dialog_finished)
        dialog.open()

    def _on_secret_dialog_finished(self, _result: int) -> None:
        self.secret_dialog = None

    def _on_controller_key_revoked(self, name: str) -> None:
        self.notice.say(f"Revoked the key {name}: it is refused from now on.")


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
        layout = QVBoxLayout(body)
        layout.setContentsMargins(24, 20, 24, 24)
        layout.setSpacing(10)
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
