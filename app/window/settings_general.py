"""Settings → General: start at login, keep running in the tray (``settings_startup``), the
front doors with their ports as they are now (``settings_front_doors``), replicas of busy models
(``settings_replicas``), then llama.cpp's requests at once and context size."""

from __future__ import annotations

from PySide6.QtCore import QSettings, QSignalBlocker, Signal
from PySide6.QtWidgets import QFormLayout, QScrollArea, QSpinBox, QVBoxLayout, QWidget

from app.autostart import Autostart
from app.controllers.endpoints import (
    LLAMACPP_CONTEXT,
    LLAMACPP_PARALLEL,
    EndpointsController,
    FrontDoorSettingsController,
)
from app.controllers.service import running_in_demo
from app.window.appearance_box import AppearanceBox
from app.window.settings_fields import (
    BrokerSettingsBox,
    align_form_labels,
    count_spin,
    with_error,
)
from app.window.settings_fields import error_label as error_label
from app.window.settings_fields import show_error as show_error
from app.window.settings_front_doors import FrontDoorsBox
from app.window.settings_replicas import ReplicasBox
from app.window.settings_startup import MINIMISE_TO_TRAY_KEY as MINIMISE_TO_TRAY_KEY
from app.window.settings_startup import StartupBox
from app.window.settings_startup import minimise_to_tray as minimise_to_tray
from app.window.widgets import muted_label

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
    """The General tab: startup and window preferences, light or dark, the front doors,
    replicas, then llama.cpp."""

    minimise_to_tray_changed = Signal(bool)

    def __init__(
        self,
        controller: FrontDoorSettingsController,
        autostart: Autostart,
        preferences: QSettings,
        *,
        tray_available: bool,
        endpoints: EndpointsController | None = None,
        demo: bool | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.startup_box = StartupBox(
            autostart,
            preferences,
            tray_available=tray_available,
            demo=running_in_demo() if demo is None else demo,
        )
        self.front_doors_box = FrontDoorsBox(controller, endpoints=endpoints)
        self.llamacpp_box = LlamaCppBox(controller)
        self.replicas_box = ReplicasBox(controller)
        self.appearance_box = AppearanceBox(preferences)
        align_form_labels(self.front_doors_box, self.replicas_box, self.llamacpp_box)
        self.startup_box.minimise_to_tray_changed.connect(self.minimise_to_tray_changed)
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(0, 12, 0, 0)
        layout.setSpacing(12)
        layout.addWidget(self.startup_box)
        layout.addWidget(self.appearance_box)
        layout.addWidget(self.front_doors_box)
        layout.addWidget(self.replicas_box)
        layout.addWidget(self.llamacpp_box)
        layout.addStretch(1)
        self.setWidget(body)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
