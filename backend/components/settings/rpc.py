"""JSON-RPC methods of the settings service."""

from __future__ import annotations

from backend.components.settings.service import SettingsService
from backend.core.rpc import Dispatcher
from backend.protocol import methods
from backend.protocol.contract import NoParams
from backend.protocol.peer import RpcPeer
from backend.protocol.types import LogLevelParams, SettingsSnapshot, SettingsUpdate


def register(dispatcher: Dispatcher, settings: SettingsService) -> None:
    """Route ``settings/*`` and ``log/set-level`` (a setting applied at once)."""

    async def get(_: NoParams, __: RpcPeer) -> SettingsSnapshot:
        return settings.snapshot()

    async def set_values(params: SettingsUpdate, _: RpcPeer) -> SettingsSnapshot:
        return settings.update(params.values)

    async def set_log_level(params: LogLevelParams, _: RpcPeer) -> LogLevelParams:
        settings.update({"log_level": params.level})
        return params

    dispatcher.add(methods.SETTINGS_GET, get)
    dispatcher.add(methods.SETTINGS_SET, set_values)
    dispatcher.add(methods.LOG_SET_LEVEL, set_log_level)
