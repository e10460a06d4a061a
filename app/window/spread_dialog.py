"""The "Load spread across members" dialog: tick the members to spread a llama.cpp model over
(those that cannot be reached are shown, disabled, with why), then load; a load with none
ticked is refused here, and the broker's refusal is shown as it gave it. Views only: the load
goes through ``SpreadLoader``."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.controllers.spread import SpreadLoader
from app.models.models import ModelRow, engine_title
from app.pending import PendingKey
from app.window.look import State, state_colour
from app.window.widgets import SPACE, muted_label

WAITING = "Loading… spreading a large model can take minutes."
NO_MEMBERS = (
    "No other computer is paired with this one: pair one on the Cluster page to spread a "
    "model over it."
)


class SpreadDialog(QDialog):
    """Choose members for one model of this computer and load it spread over them; closes
    when the model runs, stays open with the reason when it cannot."""

    def __init__(self, loader: SpreadLoader, row: ModelRow, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Load spread across members")
        self._loader = loader
        self.key: PendingKey = row.key
        intro = QLabel(
            f"Load <b>{row.model}</b> with {engine_title(row.engine)} on this computer and "
            "spread its layers over the members you tick. PAIR shares the layers out by each "
            "computer's free memory, graphics memory first."
        )
        intro.setWordWrap(True)
        self.boxes: dict[str, QCheckBox] = {}
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.hide()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.load_button: QPushButton = buttons.addButton(
            "Load spread", QDialogButtonBox.ButtonRole.ActionRole
        )
        self.load_button.clicked.connect(self._on_load_button_clicked)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.setSpacing(SPACE)
        layout.addWidget(intro)
        self._add_members(layout)
        layout.addWidget(self.message)
        layout.addStretch(1)
        layout.addWidget(buttons)
        loader.answered.connect(self._on_loader_answered)
        self.setMinimumWidth(460)

    def _add_members(self, layout: QVBoxLayout) -> None:
        candidates = self._loader.candidates(self.key)
        if not candidates:
            layout.addWidget(muted_label(NO_MEMBERS))
            self.load_button.setEnabled(False)
            self.load_button.setToolTip(NO_MEMBERS)
            return
        for candidate in candidates:
            box = QCheckBox(candidate.name)
            if not candidate.reachable:
                box.setText(f"{candidate.name} (cannot be reached)")
                box.setEnabled(False)
                box.setToolTip(
                    f"{candidate.name} cannot be reached now, so it cannot take a share."
                )
            layout.addWidget(box)
            self.boxes[candidate.node] = box

    def chosen(self) -> list[str]:
        """The node ids of the ticked members."""
        return [node for node, box in self.boxes.items() if box.isChecked() and box.isEnabled()]

    def _show(self, text: str, state: State) -> None:
        self.message.setText(text)
        colour = state_colour(state).name()
        self.message.setStyleSheet(f"color: {colour};")
        self.message.show()

    def _on_load_button_clicked(self) -> None:
        refusal = self._loader.load_across(self.key, self.chosen())
        if refusal is not None:
            self._show(refusal, State.ERROR)
            return
        self._show(WAITING, State.PENDING)
        self.load_button.setEnabled(False)
        self.load_button.setToolTip("Waiting for the answer to this load.")

    def _on_loader_answered(self, key: object, reason: str) -> None:
        if key != self.key:
            return
        if not reason:
            self.accept()
            return
        self._show(reason, State.ERROR)
        self.load_button.setEnabled(True)
        self.load_button.setToolTip("")
