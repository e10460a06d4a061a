"""Settings → General's front-doors box: the doors' ports, timeouts, preferred computer and
placement rule."""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QDoubleSpinBox, QFormLayout, QSpinBox, QWidget

from app.controllers.endpoints import (
    DOOR_PORTS,
    FIRST_CONTENT_TIMEOUT,
    HEADER_TIMEOUT,
    PINNED_NODE,
    PLACEMENT,
    EndpointsController,
    FrontDoorSettingsController,
)
from app.models.engines import MAX_PORT, MIN_PORT, door_ports
from app.window.settings_fields import (
    BrokerSettingsBox,
    pinned_combo,
    placement_combo,
    port_spin,
    show_error,
    timeout_spin,
    with_error,
)
from app.window.widgets import muted_label

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
PORT_LABELS = {
    DOOR_PORTS["ollama"]: "Ollama port",
    DOOR_PORTS["openai"]: "OpenAI port",
    DOOR_PORTS["llamacpp"]: "llama.cpp port",
}
PORT_TIPS = {
    DOOR_PORTS["ollama"]: "The port of the Ollama API door (11434 unless the service was started"
    " with another). Changing it moves the door at once: clients use the new port.",
    DOOR_PORTS["openai"]: "The port of the door where apps look for LM Studio (1234 unless the"
    " service was started with another). Changing it moves the door at once.",
    DOOR_PORTS["llamacpp"]: "The port of the door where apps look for llama-server (8080 unless"
    " the service was started with another). Changing it moves the door at once.",
}
DOOR_NAMES = {"ollama": "Ollama", "openai": "OpenAI", "llamacpp": "llama.cpp"}
PORTS_NOTE = (
    f"A port from {MIN_PORT} to {MAX_PORT}, used at once; a port another program uses is refused."
)
PLACEMENT_NOTE = (
    "Fastest to finish weighs free slots, loaded models and each computer's measured speed."
)


class FrontDoorsBox(BrokerSettingsBox):
    """The broker's front-door settings, saved one at a time with the reason shown on refusal;
    each door's port as it is now (from ``endpoints``; without it a port the service was started
    with shows as "As started")."""

    def __init__(
        self,
        controller: FrontDoorSettingsController,
        parent: QWidget | None = None,
        *,
        endpoints: EndpointsController | None = None,
    ) -> None:
        keys = (*PORT_LABELS, *TIMEOUT_LABELS, PINNED_NODE, PLACEMENT)
        super().__init__("Front doors", controller, keys, parent)
        self._endpoints = endpoints
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
                lambda value, key=key: self._on_port_value_changed(key, int(value))
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
        if endpoints is not None:
            endpoints.changed.connect(self._refresh_ports)
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

    def serving_ports(self) -> dict[str, int]:
        """Door → the port it listens on now (empty while not known)."""
        if self._endpoints is None:
            return {}
        return door_ports(self._endpoints.front_doors)

    def _refresh_ports(self) -> None:
        serving = self.serving_ports()
        for door, key in DOOR_PORTS.items():
            spin, value = self.port_spins[key], self._controller.value(key)
            saved = value if isinstance(value, int) and not isinstance(value, bool) else 0
            shown = serving.get(door) or saved
            with QSignalBlocker(spin):
                # 0 ("As started") only while the door's real port is not known.
                spin.setSpecialValueText("" if shown else "As started")
                spin.setRange(min(MIN_PORT, shown) if shown else 0, MAX_PORT)
                spin.setValue(shown)
            # A broker without the setting leaves it off.
            spin.setEnabled(self._controller.spec(key) is not None)

    def _on_port_value_changed(self, key: str, port: int) -> None:
        door = next(door for door, door_key in DOOR_PORTS.items() if door_key == key)
        serving = self.serving_ports()
        owner = next((other for other, at in serving.items() if at == port and other != door), None)
        if owner is not None:
            show_error(
                self.errors[key],
                f"Port {port} is used by PAIR's {DOOR_NAMES.get(owner, owner)} door; choose "
                "another port.",
            )
            self._refresh_ports()
            return
        if port == serving.get(door):
            return  # the door is there already
        self._controller.set_value(key, port)

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
