"""The Cluster page's Members box: the cluster's name, its members, and Add node, Remove and
Leave."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, Signal
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.controllers.cluster_page import ClusterPageController
from app.models.members import MemberRow
from app.window.cluster_dialogs import Prompts
from app.window.cluster_parts import (
    NO_MEMBERS,
    EmptyState,
    NameEdit,
    Notice,
    leave_text,
    remove_text,
    selected_row,
)
from app.window.join_window import JoinWindowRow
from app.window.settings_general import error_label, show_error
from app.window.widgets import SPACE_TIGHT, FittedTable, muted_label


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
        self.notice = Notice(reserve_lines=2)
        self._removing: MemberRow | None = None  # the member a Remove was confirmed for
        self._gone_before_answer = False  # its row went before cluster:remove answered
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
        part.addSpacing(SPACE_TIGHT)
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
        controller.membership_done.connect(self._on_controller_membership_done)
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

    def _on_controller_membership_done(self, text: str) -> None:
        if self._gone_before_answer:
            self._gone_before_answer = False
            return  # the line says already that it is no longer in the cluster
        self.notice.say(text)

    def _removed_is_gone(self) -> bool:
        removing = self._removing
        return removing is not None and self._controller.members.get(removing.node_id) is None

    def _forget_removed(self) -> None:
        # The table must not pick the next member in its place, ready for a second Remove.
        assert self._removing is not None
        # Still "Removing …": cluster:remove has not answered; its answer is then not shown.
        self._gone_before_answer = self.notice.text().startswith("Removing ")
        self.notice.say(f"{self._removing.name} is no longer in the cluster.")
        self._removing = None
        self.table.clearSelection()
        self.table.setCurrentIndex(QModelIndex())

    def _on_members_rows_changed(self, *_args: object) -> None:
        if self._removed_is_gone():
            self._forget_removed()
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
            self._removing = row
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
