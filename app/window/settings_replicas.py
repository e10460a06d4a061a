"""Settings → General's Replicas box: whether PAIR loads a busy model on more computers, the
wait that calls for another copy, how long an unused copy stays, and how many computers may
hold one model."""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QFormLayout, QSpinBox, QWidget

from app.controllers.endpoints import FrontDoorSettingsController
from app.window.settings_fields import BrokerSettingsBox, count_spin, timeout_spin, with_error
from app.window.widgets import muted_label

REPLICAS_MODE = "replicas_mode"
REPLICAS_TARGET_WAIT = "replicas_target_wait_s"
REPLICAS_TTL = "replicas_ttl_s"
REPLICAS_MAX = "replicas_max_per_model"
MODE_CHOICES = {
    "auto": "Automatic",
    "on": "On",
    "off": "Off",
}
MODE_TIP = (
    "Automatic: on while this computer's cluster has more than one member. On: always. Off: a "
    "model runs only where it is loaded."
)
WAIT_TIP = (
    "When a request to a model would wait longer than this, PAIR loads the model on another "
    "computer that has it on disk and room for it."
)
TTL_TIP = "A copy PAIR loaded is unloaded once it has not been used for this long."
MAX_TIP = "The most computers that hold one model loaded at once, counting those you loaded."
REPLICAS_NOTE = (
    "PAIR loads a busy model on an idle computer that has it, and unloads that copy when it is "
    "no longer needed. Models you loaded yourself stay loaded."
)
SECONDS_PER_MINUTE = 60.0


class ReplicasBox(BrokerSettingsBox):
    """The ``replicas_*`` settings, saved one at a time through the settings controller with
    the reason shown on refusal; the idle time is shown in minutes, saved in seconds."""

    def __init__(
        self, controller: FrontDoorSettingsController, parent: QWidget | None = None
    ) -> None:
        keys = (REPLICAS_MODE, REPLICAS_TARGET_WAIT, REPLICAS_TTL, REPLICAS_MAX)
        super().__init__("Replicas", controller, keys, parent)
        self.mode_combo = QComboBox()
        self.mode_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        for value, label in MODE_CHOICES.items():
            self.mode_combo.addItem(label, value)
        self.mode_combo.setToolTip(MODE_TIP)
        self.mode_combo.activated.connect(self._on_mode_combo_activated)
        self.wait_spin = timeout_spin(WAIT_TIP)
        self.wait_spin.setSingleStep(1)
        self.wait_spin.valueChanged.connect(self._on_wait_spin_value_changed)
        self.ttl_spin = _minutes_spin(TTL_TIP)
        self.ttl_spin.valueChanged.connect(self._on_ttl_spin_value_changed)
        self.max_spin: QSpinBox = count_spin(MAX_TIP, suffix=" computers")
        self.max_spin.valueChanged.connect(self._on_max_spin_value_changed)
        form = QFormLayout(self)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        form.addRow(self.offline_note)
        form.addRow(muted_label(REPLICAS_NOTE))
        rows = (
            ("Load on more computers", self.mode_combo, REPLICAS_MODE),
            ("When a request would wait over", self.wait_spin, REPLICAS_TARGET_WAIT),
            ("Unload an unused copy after", self.ttl_spin, REPLICAS_TTL),
            ("Most computers per model", self.max_spin, REPLICAS_MAX),
        )
        for label, control, key in rows:
            form.addRow(label, with_error(control, self.errors[key]))
        controller.changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        """Show the saved values and the schema's ranges; controls work only while the schema
        is known (a broker without these settings leaves them off)."""
        known = self._controller.spec(REPLICAS_MODE) is not None
        self.offline_note.setVisible(not known)
        with QSignalBlocker(self.mode_combo):
            index = self.mode_combo.findData(self._controller.value(REPLICAS_MODE))
            self.mode_combo.setCurrentIndex(max(0, index))
        self.mode_combo.setEnabled(known)
        self._refresh_spin(self.wait_spin, REPLICAS_TARGET_WAIT, 1.0)
        self._refresh_spin(self.ttl_spin, REPLICAS_TTL, SECONDS_PER_MINUTE)
        self._refresh_spin(self.max_spin, REPLICAS_MAX, 1.0)
        if not known:
            self.clear_errors()

    def _refresh_spin(self, spin: QDoubleSpinBox | QSpinBox, key: str, unit: float) -> None:
        """``spin`` shows the setting in ``unit`` seconds (1 for a plain number)."""
        spec = self._controller.spec(key)
        value = self._controller.value(key)
        with QSignalBlocker(spin):
            if spec is not None and isinstance(spin, QDoubleSpinBox):
                spin.setRange((spec.minimum or 0.0) / unit, (spec.maximum or 1e9) / unit)
            elif spec is not None and isinstance(spin, QSpinBox):
                spin.setRange(int(spec.minimum or 0), int(spec.maximum or 2**31 - 1))
            if isinstance(value, int | float) and not isinstance(value, bool):
                if isinstance(spin, QDoubleSpinBox):
                    spin.setValue(float(value) / unit)
                else:
                    spin.setValue(int(value))
        spin.setEnabled(spec is not None)

    def _on_mode_combo_activated(self, index: int) -> None:
        self._controller.set_value(REPLICAS_MODE, str(self.mode_combo.itemData(index)))

    def _on_wait_spin_value_changed(self, value: float) -> None:
        self._controller.set_value(REPLICAS_TARGET_WAIT, float(value))

    def _on_ttl_spin_value_changed(self, minutes: float) -> None:
        # Whole seconds: a minute shown as 0.5 is saved as 30, not 30.000000001.
        self._controller.set_value(REPLICAS_TTL, float(round(minutes * SECONDS_PER_MINUTE)))

    def _on_max_spin_value_changed(self, value: int) -> None:
        self._controller.set_value(REPLICAS_MAX, int(value))


class MinutesSpin(QDoubleSpinBox):
    """A minutes box that writes whole minutes without decimals (``60 min``, ``0.5 min``)."""

    def textFromValue(self, value: float) -> str:
        """``value`` as people write it: no trailing ``.0``."""
        return f"{value:g}"


def _minutes_spin(tooltip: str) -> QDoubleSpinBox:
    """A minutes box (half a minute is the shortest idle time) that reports a typed number
    once, not every keystroke."""
    spin = MinutesSpin()
    spin.setSuffix(" min")
    spin.setDecimals(1)
    spin.setSingleStep(1)
    spin.setMinimumWidth(110)
    spin.setKeyboardTracking(False)
    spin.setToolTip(tooltip)
    return spin
