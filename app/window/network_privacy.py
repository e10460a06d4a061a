"""The Cluster page's Network privacy box: whether this computer announces itself on the local
network (``local_discovery``) and whether the network is public (``public_network``).

``NetworkPrivacyBox(controller)`` calls only ``NetworkPrivacyController`` methods; the page
calls ``refresh(ready)`` whenever the controller or the connection changes. While the network
is public the announce switch shows off and cannot be changed, and so does the LAN access
switch (``lan_switch_shown`` and ``PUBLIC_LAN_REASON``), because the broker keeps mDNS off and
the front doors to this computer then, whatever those settings say.
"""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker
from PySide6.QtWidgets import QCheckBox, QGroupBox, QLabel, QVBoxLayout, QWidget

from app.controllers.network_privacy import (
    LOCAL_DISCOVERY,
    PUBLIC_NETWORK,
    NetworkPrivacyController,
    PrivacySetting,
)
from app.window.settings_general import error_label, show_error
from app.window.widgets import muted_label

ANNOUNCE_TEXT = "Announce this computer on the local network"
ANNOUNCE_NOTE = (
    "Other computers here can find it under Add node, and it finds theirs. Off: it is not "
    "listed; your cluster's members still reach it, and a computer can still be added by address."
)
PUBLIC_TEXT = "This is a public network (café, hotel, airport)"
PUBLIC_NOTE = (
    "Other computers here get only a refusal: no details about this computer, no invites to it, "
    "no front doors, and it is not announced. Your cluster's members keep working over their "
    "secured links."
)
PUBLIC_ANNOUNCE_REASON = "Off while this is a public network."
PUBLIC_LAN_REASON = "Off while this is a public network: only this computer uses its front doors."


def switch_indent(switch: QCheckBox) -> int:
    """Where a switch's text starts, to line its notes up under it."""
    style = switch.style()
    indicator = style.pixelMetric(style.PixelMetric.PM_IndicatorWidth)
    spacing = style.pixelMetric(style.PixelMetric.PM_CheckBoxLabelSpacing)
    return indicator + spacing


def reason_label(text: str) -> QLabel:
    """A hidden line in the normal text colour: why a switch cannot be changed now."""
    label = QLabel(text)
    label.setWordWrap(True)
    label.hide()
    return label


def lan_switch_shown(saved: bool | None, public_network: bool) -> tuple[bool, bool]:
    """The LAN access switch as shown: (checked, changeable apart from the connection)."""
    if public_network:
        return False, False
    return saved is True, saved is not None


def add_switch(layout: QVBoxLayout, switch: QCheckBox, *notes: QLabel) -> None:
    """A switch with its notes lined up under its text."""
    layout.addWidget(switch)
    under = QVBoxLayout()
    under.setContentsMargins(switch_indent(switch), 0, 0, 0)
    under.setSpacing(2)
    for note in notes:
        under.addWidget(note)
    layout.addLayout(under)


class NetworkPrivacyBox(QGroupBox):
    """The ``local_discovery`` and ``public_network`` switches, each with what it changes."""

    def __init__(self, controller: NetworkPrivacyController, parent: QWidget | None = None) -> None:
        super().__init__("Network privacy", parent)
        self._controller = controller
        self.announce_switch = QCheckBox(ANNOUNCE_TEXT)
        self.announce_reason = reason_label(PUBLIC_ANNOUNCE_REASON)
        self.public_switch = QCheckBox(PUBLIC_TEXT)
        self.errors: dict[str, QLabel] = {
            LOCAL_DISCOVERY: error_label(),
            PUBLIC_NETWORK: error_label(),
        }
        self._ready = False
        layout = QVBoxLayout(self)
        add_switch(
            layout,
            self.announce_switch,
            self.announce_reason,
            muted_label(ANNOUNCE_NOTE),
            self.errors[LOCAL_DISCOVERY],
        )
        layout.addSpacing(6)
        add_switch(
            layout, self.public_switch, muted_label(PUBLIC_NOTE), self.errors[PUBLIC_NETWORK]
        )
        self.announce_switch.toggled.connect(self._on_announce_switch_toggled)
        self.public_switch.toggled.connect(self._on_public_switch_toggled)
        controller.save_failed.connect(self._on_controller_save_failed)
        controller.changed.connect(self._on_controller_changed)

    def refresh(self, ready: bool) -> None:
        """Show the saved settings; switches change only while ``ready``."""
        self._ready = ready
        announce = self._controller.value(LOCAL_DISCOVERY)
        public = self._controller.value(PUBLIC_NETWORK)
        with QSignalBlocker(self.announce_switch):
            self.announce_switch.setChecked(announce is True and public is not True)
        with QSignalBlocker(self.public_switch):
            self.public_switch.setChecked(public is True)
        self.announce_switch.setEnabled(ready and announce is not None and public is False)
        self.announce_reason.setVisible(public is True)
        self.public_switch.setEnabled(ready and public is not None)

    def _on_controller_changed(self) -> None:
        self.refresh(self._ready)

    def _save(self, key: PrivacySetting, on: bool) -> None:
        show_error(self.errors[key], "")
        self._controller.set_value(key, on)

    def _on_announce_switch_toggled(self, on: bool) -> None:
        self._save(LOCAL_DISCOVERY, on)

    def _on_public_switch_toggled(self, on: bool) -> None:
        self._save(PUBLIC_NETWORK, on)

    def _on_controller_save_failed(self, key: str, message: str) -> None:
        error = self.errors.get(key)
        if error is not None:
            show_error(error, message)
