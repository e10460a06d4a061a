"""The door-port settings: checked like every setting, put into effect by their applier before
they are saved, and not saved at all when the applier refuses (a taken port)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from backend.components.proxy.targets import DOOR_PORT_SETTINGS, door_ports
from backend.components.settings.service import SettingsService
from backend.protocol import errors
from backend.protocol.types.settings import SettingsSnapshot, SettingValue
from tests.fakes import FakeClock


class Doors:
    """What the proxy's ``move_doors`` saw; refuses ``taken``."""

    def __init__(self, taken: int = -1) -> None:
        self.taken = taken
        self.moves: list[dict[str, int]] = []

    async def apply(self, changed: Mapping[str, SettingValue]) -> None:
        moves = door_ports(changed)
        if self.taken in moves.values():
            raise errors.Conflict(f"Port {self.taken} is used by another program")
        self.moves.append(dict(moves))


def service_with(doors: Doors, path: Path) -> tuple[SettingsService, list[SettingsSnapshot]]:
    changes: list[SettingsSnapshot] = []
    service = SettingsService(
        path, clock=FakeClock(), on_change=changes.append, on_corrupt=lambda message: None
    )
    service.load()
    service.add_applier(frozenset(DOOR_PORT_SETTINGS), doors.apply)
    return service, changes


async def test_a_changed_port_is_applied_then_saved(tmp_path: Path) -> None:
    doors = Doors()
    service, changes = service_with(doors, tmp_path / "settings.json")
    snapshot = await service.apply_update({"ollama_door_port": 11500, "node_name": "pc"})
    assert doors.moves == [{"ollama": 11500}], "only the door keys reach the applier"
    assert snapshot.values["ollama_door_port"] == 11500 and len(changes) == 1
    await service.apply_update({"ollama_door_port": 11500})
    assert doors.moves == [{"ollama": 11500}], "an unchanged port moves nothing"
    assert service.view().ollama_door_port == 11500


async def test_a_refused_port_saves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    doors = Doors(taken=8081)
    service, changes = service_with(doors, path)
    with pytest.raises(errors.Conflict, match="Port 8081"):
        await service.apply_update({"openai_door_port": 8081, "node_name": "pc"})
    assert changes == [] and not path.exists()
    assert service.snapshot().values["node_name"] == "", "all or nothing"


@pytest.mark.parametrize("value", [-1, 1, 80, 1023, 65536, "1234", True, 1.5])
async def test_a_bad_port_is_refused_before_any_door_moves(tmp_path: Path, value: object) -> None:
    doors = Doors()
    service, _ = service_with(doors, tmp_path / "settings.json")
    with pytest.raises(errors.InvalidParams, match="ollama_door_port"):
        await service.apply_update({"ollama_door_port": value})
    assert doors.moves == []


def test_zero_means_the_port_the_node_was_started_with() -> None:
    assert door_ports(
        {"ollama_door_port": 0, "openai_door_port": 1300, "llamacpp_door_port": 8090}
    ) == {"ollama": 0, "openai": 1300, "llamacpp": 8090}


@pytest.mark.parametrize("key", sorted(DOOR_PORT_SETTINGS))
async def test_every_door_takes_the_engine_port_range_or_zero(tmp_path: Path, key: str) -> None:
    doors = Doors()
    service, _ = service_with(doors, tmp_path / "settings.json")
    with pytest.raises(errors.InvalidParams, match="from 1024 to 65535"):
        await service.apply_update({key: 1023})
    for port in (1024, 65535, 0):
        await service.apply_update({key: port})
    door = DOOR_PORT_SETTINGS[key]
    assert doors.moves == [{door: 1024}, {door: 65535}, {door: 0}]
