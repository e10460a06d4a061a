"""The parts the settings tabs share: a control with its error label under it, the boxes'
spin boxes and lists, and a group of broker settings with one error label per key."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.controllers.endpoints import FrontDoorSettingsController
from app.models.errors import SEVERITY_COLOURS
from app.window.widgets import muted_label

OFFLINE_NOTE = "These settings can be changed while the service runs."
PLACEMENT_CHOICES = {
    "pair": "Fastest to finish (PAIR)",
    "reference": "Least busy (reference)",
}
PLACEMENT_TIP = (
    "How a front door chooses among the computers that have the model. Fastest to finish: "
    "free slots, whether the model is loaded, each computer's measured speed and the "
    "conversation's last computer. Least busy: pending requests and GPU load, as NVIDIA's "
    "Personal AI Router does."
)


def home_relative(location: str) -> str:
    """A path under the home folder written with ``~`` (other text unchanged)."""
    home = str(Path.home())
    if location == home or location.startswith(home + os.sep):
        return "~" + location[len(home) :]
    return location


def error_label() -> QLabel:
    """A hidden, word-wrapped label in the error colour, for a problem next to its control."""
    label = QLabel()
    label.setWordWrap(True)
    label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
    label.setStyleSheet(f"color: {SEVERITY_COLOURS['error'].name()};")
    label.hide()
    return label


def with_error(control: QWidget, error: QLabel) -> QWidget:
    """A form field: the control at its natural width, its error label right under it."""
    field = QWidget()
    layout = QVBoxLayout(field)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.setSpacing(2)
    layout.addWidget(control, 0, Qt.AlignmentFlag.AlignLeft)
    layout.addWidget(error)
    return field


def show_error(label: QLabel, message: str) -> None:
    """Show ``message`` in an error label, or hide it when empty."""
    label.setText(message)
    label.setVisible(bool(message))


def align_form_labels(*boxes: QWidget) -> None:
    """Give the forms of stacked boxes one label width, so their controls line up."""
    labels: list[QLabel] = []
    for box in boxes:
        form = box.layout()
        if isinstance(form, QFormLayout):
            for row in range(form.rowCount()):
                item = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
                label = item.widget() if item is not None else None
                if isinstance(label, QLabel):
                    labels.append(label)
    width = max((label.sizeHint().width() for label in labels), default=0)
    for label in labels:
        label.setMinimumWidth(width)


def timeout_spin(tooltip: str) -> QDoubleSpinBox:
    """A seconds box that reports a typed number once, not every keystroke."""
    spin = QDoubleSpinBox()
    spin.setSuffix(" s")
    spin.setDecimals(0)
    spin.setMinimumWidth(110)
    spin.setSingleStep(10)
    spin.setKeyboardTracking(False)
    spin.setToolTip(tooltip)
    return spin


def pinned_combo() -> QComboBox:
    """The preferred-computer list, wide enough for a node name."""
    combo = QComboBox()
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
    combo.setMinimumContentsLength(24)
    combo.setToolTip("The computer the front doors try first whenever it has the requested model.")
    return combo


def placement_combo() -> QComboBox:
    """The placement rule's list (the setting's values as data)."""
    combo = QComboBox()
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
    for value, label in PLACEMENT_CHOICES.items():
        combo.addItem(label, value)
    combo.setToolTip(PLACEMENT_TIP)
    return combo


def count_spin(tooltip: str, *, suffix: str = "", step: int = 1) -> QSpinBox:
    """A whole-number box that reports a typed number once, not every keystroke (each saved
    change restarts a running engine)."""
    spin = QSpinBox()
    spin.setSuffix(suffix)
    spin.setSingleStep(step)
    spin.setMinimumWidth(110)
    spin.setKeyboardTracking(False)
    spin.setGroupSeparatorShown(True)
    spin.setToolTip(tooltip)
    return spin


def port_spin(tooltip: str) -> QSpinBox:
    """A port box taking typed values only (each saved value moves a door); 0 shows as the
    port the service was started with."""
    spin = QSpinBox()
    spin.setSpecialValueText("As started")
    spin.setButtonSymbols(QSpinBox.ButtonSymbols.NoButtons)
    spin.setMinimumWidth(110)
    spin.setKeyboardTracking(False)
    spin.setToolTip(tooltip)
    return spin


class BrokerSettingsBox(QGroupBox):
    """A group of broker settings: one error label per key, cleared on save, set on refusal."""

    def __init__(
        self,
        title: str,
        controller: FrontDoorSettingsController,
        keys: tuple[str, ...],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(title, parent)
        self._controller = controller
        self.errors: dict[str, QLabel] = {key: error_label() for key in keys}
        self.offline_note = muted_label(OFFLINE_NOTE)
        controller.value_rejected.connect(self._on_controller_value_rejected)
        controller.value_saved.connect(self._on_controller_value_saved)

    def clear_errors(self) -> None:
        """Hide every error label (the saved values are gone with the connection)."""
        for label in self.errors.values():
            show_error(label, "")

    def _on_controller_value_rejected(self, key: str, reason: str) -> None:
        if key in self.errors:
            show_error(self.errors[key], reason)

    def _on_controller_value_saved(self, key: str) -> None:
        if key in self.errors:
            show_error(self.errors[key], "")
