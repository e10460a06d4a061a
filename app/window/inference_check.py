"""The inference check box: one button that tries every running engine of every computer, and
a row per engine with its outcome (usable on the Playground page and in Settings → Service)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.controllers.inference_check import CheckRow, InferenceCheckController
from app.window.look import State, state_colour
from app.window.theme import is_dark
from app.window.widgets import muted_label

COLUMNS = ("Computer", "Engine", "Model", "Result")
OUTCOME_COLUMN = 3
OUTCOME_STATES = {"ok": State.OK, "failed": State.ERROR}
VISIBLE_ROWS = 4  # the list keeps this height, so the page does not jump when rows arrive
DESCRIPTION = "Asks each running engine of every computer for a few words, to show it answers."


class InferenceCheckBox(QGroupBox):
    """A "Check every engine" button, and each engine's outcome as the answers come."""

    def __init__(self, controller: InferenceCheckController, parent: QWidget | None = None) -> None:
        super().__init__("Inference check", parent)
        self._controller = controller
        self.check_button = QPushButton("Check every engine")
        self.check_button.setToolTip(
            "Sends a tiny request to one model of each running engine on each computer, "
            "through this computer's front door."
        )
        self.note = muted_label(DESCRIPTION)
        self.table = QTreeWidget()
        self.table.setHeaderLabels(COLUMNS)
        self.table.setRootIsDecorated(False)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        header = self.table.header()
        header.setStretchLastSection(True)
        for column in range(OUTCOME_COLUMN):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        row_height = self.table.fontMetrics().height() + 8
        self.table.setFixedHeight(header.sizeHint().height() + VISIBLE_ROWS * row_height + 4)
        top = QHBoxLayout()
        top.addWidget(self.note, 1)
        top.addWidget(self.check_button, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.table)
        self.check_button.clicked.connect(controller.check)
        controller.rows_changed.connect(self.refresh)
        self.refresh()

    def outcome(self, computer: str, engine: str) -> str:
        """The outcome shown for one engine of one computer ("" when it has no row)."""
        for index in range(self.table.topLevelItemCount()):
            item = self.table.topLevelItem(index)
            if item is not None and (item.text(0), item.data(1, Qt.ItemDataRole.UserRole)) == (
                computer,
                engine,
            ):
                return item.text(OUTCOME_COLUMN)
        return ""

    def changeEvent(self, event: QEvent) -> None:
        """Show the outcomes in the shades of the new palette when it turns light or dark."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self.refresh()

    def refresh(self) -> None:
        """Show the rows (and why there are none) as the controller has them."""
        controller = self._controller
        self.table.clear()
        for row in controller.rows:
            self.table.addTopLevelItem(_item(row, dark=is_dark(self.palette())))
        self.note.setText(controller.note or DESCRIPTION)
        self.check_button.setEnabled(not controller.running)
        self.check_button.setText("Checking…" if controller.running else "Check every engine")


def _item(row: CheckRow, *, dark: bool) -> QTreeWidgetItem:
    target = row.target
    item = QTreeWidgetItem([target.computer, target.engine_title, target.model or "", row.outcome])
    item.setData(1, Qt.ItemDataRole.UserRole, target.engine)
    item.setToolTip(OUTCOME_COLUMN, row.outcome)
    state = OUTCOME_STATES.get(row.state)
    if state is not None:
        item.setForeground(OUTCOME_COLUMN, state_colour(state, dark))
    return item
