"""The network settings: ``local_discovery`` (mDNS on or off) and ``public_network`` (strangers
refused, no mDNS, the doors kept to this computer whatever ``lan_access`` says)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.components.settings.service import SettingsService
from backend.protocol import errors
from tests.fakes import FakeClock


def _service(path: Path) -> SettingsService:
    service = SettingsService(
        path, clock=FakeClock(), on_change=lambda _: None, on_corrupt=lambda _: None
    )
    service.load()
    return service


def test_by_default_this_computer_announces_itself_and_trusts_the_network(
    tmp_path: Path,
) -> None:
    view = _service(tmp_path / "settings.json").view()
    assert view.local_discovery and not view.public_network and view.announces


def test_local_discovery_off_stops_mdns_only(tmp_path: Path) -> None:
    service = _service(tmp_path / "settings.json")
    service.update({"local_discovery": False, "lan_access": True})
    view = service.view()
    assert not view.announces and view.lan_access and not view.public_network


def test_a_public_network_turns_mdns_and_the_doors_lan_access_off_but_keeps_the_choice(
    tmp_path: Path,
) -> None:
    path = tmp_path / "settings.json"
    service = _service(path)
    service.update({"lan_access": True, "public_network": True})
    assert not service.view().lan_access and not service.view().announces
    assert service.snapshot().values["lan_access"] is True  # what the user chose stays
    assert not _service(path).view().lan_access  # and so after a restart
    service.update({"public_network": False})
    assert service.view().lan_access and service.view().announces


def test_the_network_settings_take_booleans_only(tmp_path: Path) -> None:
    service = _service(tmp_path / "settings.json")
    with pytest.raises(errors.InvalidParams, match="public_network"):
        service.update({"public_network": "yes"})
