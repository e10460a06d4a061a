"""JSON-RPC methods of the settings service."""

from __future__ import annotations

from collections.abc import Callable

from backend.components.settings.log_level import LogLevels
from backend.components.settings.service import SettingsService
from backend.core.rpc import Dispatcher
from backend.protocol import methods
from backend.protocol.contract import NoParams
from backend.protocol.peer import RpcPeer
from backend.protocol.types.broker import LogLevel, LogLevelParams
from backend.protocol.types.settings import SettingsSnapshot, SettingsUpdate


def register(
    dispatcher: Dispatcher,
    settings: SettingsService,
    *,
    levels: LogLevels,
    apply_level: Callable[[LogLevel], None],
) -> None:
    """Route ``settings:*`` and ``log:set-level`` (a level chosen explicitly, applied at once
    and saved). A changed ``log_level`` setting is applied as ``levels`` decides."""

    def follow(level: LogLevel | None) -> None:
        if level is not None:
            apply_level(level)

    async def get(_: NoParams, __: RpcPeer) -> SettingsSnapshot:
        return settings.snapshot()

    async def set_values(params: SettingsUpdate, _: RpcPeer) -> SettingsSnapshot:
        snapshot = await settings.apply_update(params.values)
        follow(levels.setting_changed(settings.view().log_level))
        return snapshot

    async def set_log_level(params: LogLevelParams, _: RpcPeer) -> LogLevelParams:
        settings.update({"log_level": params.level})
        follow(levels.choose(params.level))
        return params

    dispatcher.add(methods.SETTINGS_GET, get)
    dispatcher.add(methods.SETTINGS_SET, set_values)
    dispatcher.add(methods.LOG_SET_LEVEL, set_log_level)
