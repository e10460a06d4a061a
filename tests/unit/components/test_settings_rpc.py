"""``settings:set`` and ``log:set-level`` through the real dispatcher: which level is applied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from backend.components.settings import rpc
from backend.components.settings.log_level import LogLevels
from backend.components.settings.service import SettingsService
from backend.core.rpc import Dispatcher
from backend.protocol.peer import RpcPeer
from backend.protocol.types.broker import LogLevel, LogLevelParams
from backend.protocol.types.settings import SettingsSnapshot
from tests.fakes import FakeClock

NO_PEER = cast(RpcPeer, None)  # the settings handlers never look at the caller


class Routed:
    def __init__(self, path: Path, command_line: LogLevel | None) -> None:
        self.changes: list[SettingsSnapshot] = []
        self.applied: list[LogLevel] = []
        self.settings = SettingsService(
            path, clock=FakeClock(), on_change=self.changes.append, on_corrupt=lambda _: None
        )
        self.settings.load()
        self.levels = LogLevels(command_line=command_line, saved=self.settings.view().log_level)
        self.dispatcher = Dispatcher()
        rpc.register(
            self.dispatcher, self.settings, levels=self.levels, apply_level=self.applied.append
        )

    async def call(self, method: str, params: Any) -> Any:
        return await self.dispatcher(method, params, NO_PEER)


async def test_an_unrelated_setting_leaves_the_command_line_level_alone(tmp_path: Path) -> None:
    routed = Routed(tmp_path / "settings.json", command_line="debug")
    await routed.call("settings/set", {"values": {"node_name": "gpu-box"}})
    await routed.call("settings/set", {"values": {"log_level": "error"}})
    assert routed.applied == []
    assert routed.levels.current == "debug"
    assert len(routed.changes) == 2


async def test_log_set_level_applies_saves_and_ends_the_command_line_level(
    tmp_path: Path,
) -> None:
    path = tmp_path / "settings.json"
    routed = Routed(path, command_line="debug")
    answer = await routed.call("log:set-level", {"level": "warning"})
    assert answer == LogLevelParams(level="warning")
    assert routed.applied == ["warning"]
    assert json.loads(path.read_text())["log_level"] == "warning"
    await routed.call("settings/set", {"values": {"log_level": "error"}})
    assert routed.applied == ["warning", "error"]


async def test_without_a_command_line_level_a_changed_setting_applies_once(
    tmp_path: Path,
) -> None:
    routed = Routed(tmp_path / "settings.json", command_line=None)
    await routed.call("settings/set", {"values": {"log_level": "debug", "node_name": "a"}})
    await routed.call("settings/set", {"values": {"node_name": "b"}})
    assert routed.applied == ["debug"]
