"""The Network privacy switches' controller: reads and saves ``local_discovery`` and
``public_network`` through the settings store; the broker applies both while it runs."""

from __future__ import annotations

import logging
from typing import Literal

from PySide6.QtCore import QObject, Signal

from app.broker.connection import BrokerConnection
from app.controllers.base import Controller
from app.stores.settings import SettingsStore
from backend.protocol.errors import RpcError

log = logging.getLogger(__name__)

PrivacySetting = Literal["local_discovery", "public_network"]
LOCAL_DISCOVERY: PrivacySetting = "local_discovery"
PUBLIC_NETWORK: PrivacySetting = "public_network"
_WHAT = {LOCAL_DISCOVERY: "announcing this computer", PUBLIC_NETWORK: "public network"}


class NetworkPrivacyController(Controller):
    """Shows the two privacy settings and saves a switched one; owns the save tasks."""

    changed = Signal()  # a setting changed, or a save failed and the saved value shows again
    save_failed = Signal(str, str)  # the setting's key, why (for the user)

    def __init__(
        self, connection: BrokerConnection, settings: SettingsStore, parent: QObject | None = None
    ) -> None:
        super().__init__(connection, parent)
        self.settings = settings
        settings.changed.connect(self.changed)

    def value(self, key: PrivacySetting) -> bool | None:
        """The saved setting; None until read (or when the broker has no such key)."""
        if self.settings.spec(key) is None:
            return None
        return self.settings.value(key) is True

    @property
    def public_network(self) -> bool:
        """Whether this computer treats its network as public right now."""
        return self.value(PUBLIC_NETWORK) is True

    def set_value(self, key: PrivacySetting, on: bool) -> None:
        """Save one setting (``changed``, or ``save_failed`` then ``changed``)."""
        saved = self.value(key)
        if saved is None or saved == on:
            return
        self._tasks.spawn(self._save(key, on), name=f"save-{key}")

    async def _save(self, key: PrivacySetting, on: bool) -> None:
        try:
            await self.settings.save({key: on})
        except RpcError as exc:
            log.info("settings:set %s failed: %s", key, exc)
            verb = "turn on" if on else "turn off"
            self.save_failed.emit(key, f"Could not {verb} {_WHAT[key]}: {exc}")
            self.changed.emit()  # the switch shows the saved value again
