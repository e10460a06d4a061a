"""Settings → General: start at login, keep running in the tray, the front doors' ports,
timeouts, pinned node and placement rule, llama.cpp's requests at once and context size."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QSettings, QSignalBlocker, Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.autostart import Autostart
from app.controllers.endpoints import (
    DOOR_PORTS,
    FIRST_CONTENT_TIMEOUT,
    HEADER_TIMEOUT,
    LLAMACPP_CONTEXT,
    LLAMACPP_PARALLEL,
    PINNED_NODE,
    PLACEMENT,
    FrontDoorSettingsController,
)
from app.models.errors import SEVERITY_COLOURS
from app.window.widgets import muted_label

MINIMISE_TO_TRAY_KEY = "window/minimise_to_tray"
TIMEOUT_LABELS = {
    HEADER_TIMEOUT: "Wait for an answer",
    FIRST_CONTENT_TIMEOUT: "Wait for the first words",
}
TIMEOUTS_NOTE = (
    "When a computer takes longer than this, PAIR sends the request to another computer that "
    "has the model."
)
TIMEOUT_TIPS = {
    HEADER_TIMEOUT: "How long a front door waits for an engine to start answering before it "
    "tries another computer.",
    FIRST_CONTENT_TIMEOUT: "How long a front door waits, once an engine answered, for its first "
    "output before it tries another computer (a cold model load counts).",
}
OFFLINE_NOTE = "These settings can be changed while the service runs."
PORT_LABELS = {DOOR_PORTS["ollama"]: "Ollama port", DOOR_PORTS["openai"]: "OpenAI port"}
PORT_TIPS = {
    DOOR_PORTS["ollama"]: "The port of the Ollama API door (11434 unless the service was started"
    " with another). Changing it moves the door at once: clients use the new port.",
    DOOR_PORTS["openai"]: "The port of the door where apps look for LM Studio (1234 unless the"
    " service was started with another). Changing it moves the door at once.",
}
PORTS_NOTE = "A new port is used at once; a port another program uses is refused."
LLAMACPP_LABELS = {
    LLAMACPP_PARALLEL: "Requests at once",
    LLAMACPP_CONTEXT: "Context size",
}
LLAMACPP_TIPS = {
    LLAMACPP_PARALLEL: "How many requests llama.cpp answers at the same time (its slots).",
    LLAMACPP_CONTEXT: "How many tokens of conversation llama.cpp keeps, split among the "
    "requests it answers at once.",
}
LLAMACPP_NOTE = (
    "A running llama.cpp restarts to apply these; the context is shared by the requests it runs "
    "at once."
)
CONTEXT_STEP = 1024
PLACEMENT_CHOICES = {
    "pair": "Fastest to finish (PAIR)",
    "reference": "Least busy (reference)",
}
PLACEMENT_NOTE = (
    "Fastest to finish weighs free slots, loaded models and each computer's measured speed."
)
PLACEMENT_TIP = (
    "How a front door chooses among the computers that have the model. Fastest to finish: "
    "free slots, whether the model is loaded, each computer's measured speed and the "
    "conversation's last computer. Least busy: pending requests and GPU load, as NVIDIA's "
    "Personal AI Router does."
)


def minimise_to_tray(preferences: QSettings) -> bool:
    """Whether closing the window keeps PAIR in the tray (the default) instead of quitting."""
    return bool(preferences.value(MINIMISE_TO_TRAY_KEY, True, type=bool))


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


class StartupBox(QGroupBox):
    """Start at login and keep running in the tray."""

    minimise_to_tray_changed = Signal(bool)

    def __init__(
        self,
        autostart: Autostart,
        preferences: QSettings,
        *,
        tray_available: bool,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__("Startup and window", parent)
        self._autostart = autostart
        self._preferences = preferences
        self.autostart_check = QCheckBox("Start PAIR when I log in")
        self.autostart_note = muted_label(f"Adds {home_relative(autostart.location)}")
        self.autostart_error = error_label()
        self.tray_check = QCheckBox("Keep PAIR running in the tray when the window is closed")
        self.tray_note = muted_label()
        self.set_tray_available(tray_available)
        self.autostart_check.setChecked(self._read_autostart())
        layout = QVBoxLayout(self)
        for widget in (self.autostart_check, self.autostart_note, self.autostart_error):
            layout.addWidget(widget)
        layout.addWidget(self.tray_check)
        layout.addWidget(self.tray_note)
        self.autostart_check.toggled.connect(self._on_autostart_check_toggled)
        self.tray_check.toggled.connect(self._on_tray_check_toggled)

    def set_tray_available(self, available: bool) -> None:
        """Offer the tray option (the desktop's tray may appear after PAIR started)."""
        self.tray_note.setText(
            "Closing the window hides it; Quit in the tray menu stops PAIR."
            if available
            else "This desktop has no system tray, so closing the window quits PAIR."
        )
        with QSignalBlocker(self.tray_check):
            self.tray_check.setEnabled(available)
            self.tray_check.setChecked(available and minimise_to_tray(self._preferences))

    def _read_autostart(self) -> bool:
        try:
            return self._autostart.is_enabled()
        except OSError as exc:
            show_error(self.autostart_error, f"Cannot read the login item: {exc}")
            return False

    def _on_autostart_check_toggled(self, on: bool) -> None:
        try:
            if on:
                self._autostart.enable()
            else:
                self._autostart.disable()
        except OSError as exc:
            verb = "add" if on else "remove"
            show_error(self.autostart_error, f"Could not {verb} the login item: {exc}")
            with QSignalBlocker(self.autostart_check):
                self.autostart_check.setChecked(self._read_autostart())
            return
        show_error(self.autostart_error, "")

    def _on_tray_check_toggled(self, on: bool) -> None:
        self._preferences.setValue(MINIMISE_TO_TRAY_KEY, on)
        self._preferences.sync()
        self.minimise_to_tray_changed.emit(on)


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


class FrontDoorsBox(BrokerSettingsBox):
    """The broker's front-door settings, saved one at a time with the reason shown on refusal."""

    def __init__(
        self, controller: FrontDoorSettingsController, parent: QWidget | None = None
    ) -> None:
        keys = (*PORT_LABELS, *TIMEOUT_LABELS, PINNED_NODE, PLACEMENT)
        super().__init__("Front doors", controller, keys, parent)
        self.spins: dict[str, QDoubleSpinBox] = {}
        self.port_spins: dict[str, QSpinBox] = {}
        self.pinned_combo = pinned_combo()
        self.pinned_combo.activated.connect(self._on_pinned_combo_activated)
        self.placement_combo = placement_combo()
        self.placement_combo.activated.connect(self._on_placement_combo_activated)
        form = QFormLayout(self)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        form.addRow(self.offline_note)
        for key, label in PORT_LABELS.items():
            self.port_spins[key] = port = port_spin(PORT_TIPS[key])
            port.valueChanged.connect(
                lambda value, key=key: self._controller.set_value(key, int(value))
            )
            form.addRow(label, with_error(port, self.errors[key]))
        form.addRow(muted_label(PORTS_NOTE))
        for key, label in TIMEOUT_LABELS.items():
            self.spins[key] = spin = timeout_spin(TIMEOUT_TIPS[key])
            spin.valueChanged.connect(
                lambda value, key=key: self._on_spin_value_changed(key, value)
            )
            form.addRow(label, with_error(spin, self.errors[key]))
        form.addRow(muted_label(TIMEOUTS_NOTE))
        form.addRow("Preferred computer", with_error(self.pinned_combo, self.errors[PINNED_NODE]))
        form.addRow(muted_label("Requests go to the preferred computer when it has the model."))
        form.addRow("Choose by", with_error(self.placement_combo, self.errors[PLACEMENT]))
        form.addRow(muted_label(PLACEMENT_NOTE))
        controller.changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        """Show the saved values; controls work only while the schema is known."""
        connected = self._controller.spec(HEADER_TIMEOUT) is not None
        self.offline_note.setVisible(not connected)
        for key, spin in self.spins.items():
            spec = self._controller.spec(key)
            value = self._controller.value(key)
            with QSignalBlocker(spin):
                if spec is not None:
                    spin.setRange(spec.minimum or 0.0, spec.maximum or 1e9)
                if isinstance(value, int | float):
                    spin.setValue(float(value))
            spin.setEnabled(spec is not None)
        self._refresh_ports()
        self._fill_pinned_combo()
        self.pinned_combo.setEnabled(self._controller.spec(PINNED_NODE) is not None)
        self._refresh_placement()
        if not connected:
            self.clear_errors()

    def _refresh_ports(self) -> None:
        for key, spin in self.port_spins.items():
            spec, value = self._controller.spec(key), self._controller.value(key)
            with QSignalBlocker(spin):
                if spec is not None:
                    spin.setRange(int(spec.minimum or 0), int(spec.maximum or 65535))
                if isinstance(value, int) and not isinstance(value, bool):
                    spin.setValue(value)
            spin.setEnabled(spec is not None)  # a broker without the setting leaves it off

    def _refresh_placement(self) -> None:
        value = self._controller.value(PLACEMENT)
        with QSignalBlocker(self.placement_combo):
            self.placement_combo.setCurrentIndex(max(0, self.placement_combo.findData(value)))
        # A broker without the setting leaves it off.
        self.placement_combo.setEnabled(self._controller.spec(PLACEMENT) is not None)

    def showEvent(self, event: QShowEvent) -> None:
        """Re-read the known computers whenever the tab is shown."""
        super().showEvent(event)
        self._controller.refresh_nodes()

    def _fill_pinned_combo(self) -> None:
        pinned = str(self._controller.value(PINNED_NODE) or "")
        with QSignalBlocker(self.pinned_combo):
            self.pinned_combo.clear()
            for choice in self._controller.node_choices():
                self.pinned_combo.addItem(choice.label, choice.node_id)
            self.pinned_combo.setCurrentIndex(max(0, self.pinned_combo.findData(pinned)))

    def _on_spin_value_changed(self, key: str, value: float) -> None:
        self._controller.set_value(key, value)

    def _on_pinned_combo_activated(self, index: int) -> None:
        self._controller.set_value(PINNED_NODE, str(self.pinned_combo.itemData(index)))

    def _on_placement_combo_activated(self, index: int) -> None:
        self._controller.set_value(PLACEMENT, str(self.placement_combo.itemData(index)))


class LlamaCppBox(BrokerSettingsBox):
    """llama.cpp's requests at once (its ``-np`` slots) and context size; the broker restarts a
    running llama.cpp to apply a change. The model is chosen on the Models page instead."""

    def __init__(
        self, controller: FrontDoorSettingsController, parent: QWidget | None = None
    ) -> None:
        super().__init__("llama.cpp", controller, tuple(LLAMACPP_LABELS), parent)
        self.spins: dict[str, QSpinBox] = {
            LLAMACPP_PARALLEL: count_spin(LLAMACPP_TIPS[LLAMACPP_PARALLEL]),
            LLAMACPP_CONTEXT: count_spin(
                LLAMACPP_TIPS[LLAMACPP_CONTEXT], suffix=" tokens", step=CONTEXT_STEP
            ),
        }
        form = QFormLayout(self)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        form.addRow(self.offline_note)
        for key, spin in self.spins.items():
            spin.valueChanged.connect(
                lambda value, key=key: self._on_spin_value_changed(key, value)
            )
            form.addRow(LLAMACPP_LABELS[key], with_error(spin, self.errors[key]))
        form.addRow(muted_label(LLAMACPP_NOTE))
        controller.changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        """Show the saved values and the schema's ranges; controls work only while the schema
        is known (a broker without these settings leaves them off too)."""
        known = all(self._controller.spec(key) is not None for key in self.spins)
        self.offline_note.setVisible(not known)
        for key, spin in self.spins.items():
            spec = self._controller.spec(key)
            value = self._controller.value(key)
            with QSignalBlocker(spin):
                if spec is not None:
                    spin.setRange(int(spec.minimum or 0), int(spec.maximum or 2**31 - 1))
                if isinstance(value, int | float) and not isinstance(value, bool):
                    spin.setValue(int(value))
            spin.setEnabled(spec is not None)
        if not known:
            self.clear_errors()

    def _on_spin_value_changed(self, key: str, value: int) -> None:
        self._controller.set_value(key, int(value))


class GeneralSettings(QScrollArea):
    """The General tab: startup and window preferences, the front doors, then llama.cpp."""

    minimise_to_tray_changed = Signal(bool)

    def __init__(
        self,
        controller: FrontDoorSettingsController,
        autostart: Autostart,
        preferences: QSettings,
        *,
        tray_available: bool,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.startup_box = StartupBox(autostart, preferences, tray_available=tray_available)
        self.front_doors_box = FrontDoorsBox(controller)
        self.llamacpp_box = LlamaCppBox(controller)
        align_form_labels(self.front_doors_box, self.llamacpp_box)
        self.startup_box.minimise_to_tray_changed.connect(self.minimise_to_tray_changed)
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(0, 12, 0, 0)
        layout.setSpacing(12)
        layout.addWidget(self.startup_box)
        layout.addWidget(self.front_doors_box)
        layout.addWidget(self.llamacpp_box)
        layout.addStretch(1)
        self.setWidget(body)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
