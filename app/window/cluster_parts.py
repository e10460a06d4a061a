"""The Cluster page's small parts: its texts, the name field, the identity box, the outcome
line under a section's buttons and the empty state."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.broker.state import ServiceState
from app.fingerprint import grouped
from app.models.keyed_table import ROW_ROLE
from app.models.members import day_text
from app.window.look import State
from app.window.widgets import (
    SPACE,
    SPACE_SECTION,
    SPACE_TIGHT,
    copy_to_clipboard,
    fixed_font,
    headline,
    muted_label,
    tint,
)
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
        f"{name} is removed for good: this cluster never accepts its current certificate "
        "again, and it is told to leave. Its jobs stay in the history.\n\nTo bring that "
        "computer back later, reset PAIR on it (Settings → Service → Reset app data gives it a "
        "new identity), then invite it again with Add node…."
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
    """A line under a section's buttons: what a command did, or (in red) why it failed.

    With ``reserve_lines`` it keeps that many lines' room while empty, so what is below it
    stays put when an outcome appears (the cursor may be on its way there)."""

    def __init__(self, parent: QWidget | None = None, *, reserve_lines: int = 0) -> None:
        super().__init__(parent)
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self._reserved = reserve_lines > 0
        if self._reserved:
            self.setMinimumHeight(self.fontMetrics().lineSpacing() * reserve_lines)
        self.setVisible(self._reserved)

    def say(self, text: str) -> None:
        """Show an outcome."""
        tint(self, None)
        self.setText(text)
        self.setVisible(bool(text) or self._reserved)

    def warn(self, text: str) -> None:
        """Show a failure."""
        tint(self, State.ERROR)
        self.setText(text)
        self.setVisible(bool(text) or self._reserved)


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
        self.headline = headline(EMPTY_HEADLINE)
        self.message = muted_label(EMPTY_MESSAGE)
        self.removed_note = muted_label()
        self.add_button = QPushButton("Add node…")
        self.add_button.clicked.connect(self.add_node_requested)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, SPACE_SECTION, 0, SPACE_SECTION)
        layout.setSpacing(SPACE)
        for widget in (self.headline, self.message, self.removed_note):
            widget.setAlignment(Qt.AlignmentFlag.AlignCenter)
            layout.addWidget(widget)
        layout.addSpacing(SPACE_TIGHT)
        layout.addWidget(self.add_button, 0, Qt.AlignmentFlag.AlignCenter)
        if join_row is not None:
            layout.addSpacing(SPACE_TIGHT)
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
