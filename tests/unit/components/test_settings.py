"""Settings: typed validation, all-or-nothing updates, atomic 0600 file, corrupt file set aside."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import msgspec.structs
import pytest

from backend.components.settings import schema
from backend.components.settings.service import SettingsService
from backend.components.settings.view import SettingsView
from backend.protocol import errors
from backend.protocol.types.settings import SettingsSnapshot
from tests.fakes import FakeClock


def _service(path: Path) -> tuple[SettingsService, list[SettingsSnapshot], list[str]]:
    changes: list[SettingsSnapshot] = []
    corrupt: list[str] = []
    service = SettingsService(
        path, clock=FakeClock(), on_change=changes.append, on_corrupt=corrupt.append
    )
    service.load()
    return service, changes, corrupt


def test_defaults_when_no_file(tmp_path: Path) -> None:
    service, _, corrupt = _service(tmp_path / "settings.json")
    assert service.snapshot().values == schema.defaults()
    assert corrupt == []


def test_update_persists_with_mode_0600_and_survives_reload(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    service, changes, _ = _service(path)
    service.update({"log_level": "debug", "node_name": "gpu-box"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert changes[-1].values["log_level"] == "debug"
    reloaded, _, _ = _service(path)
    assert reloaded.view().node_name == "gpu-box"


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"log_level": 3}, "expects a string; got int 3"),
        ({"log_level": "loud"}, "must be one of debug, info, warning, error"),
        ({"no_such": True}, "unknown setting 'no_such'"),
        ({"node_name": "x" * 300}, "longer than 256"),
    ],
)
def test_wrong_values_get_a_clear_error_and_change_nothing(
    tmp_path: Path, values: dict[str, object], needle: str
) -> None:
    path = tmp_path / "settings.json"
    service, changes, _ = _service(path)
    with pytest.raises(errors.InvalidParams, match=needle):
        service.update({"node_name": "ok", **values})
    assert service.view().node_name == ""
    assert changes == []
    assert not path.exists()


def test_corrupt_file_is_set_aside_and_defaults_used(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text("{ this is not json")
    service, _, corrupt = _service(path)
    assert service.snapshot().values == schema.defaults()
    kept = list(tmp_path.glob("settings.json.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_text() == "{ this is not json"
    assert "could not be read" in corrupt[0]
    assert not path.exists()


def test_unknown_keys_in_the_file_are_kept_and_bad_values_fall_back(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"from_the_future": [1, 2], "log_level": 7, "node_name": "a"}))
    service, _, corrupt = _service(path)
    assert service.view().log_level == "info"
    assert service.view().node_name == "a"
    assert corrupt == []
    service.update({"node_name": "b"})
    assert json.loads(path.read_text())["from_the_future"] == [1, 2]


def test_empty_update_is_rejected(tmp_path: Path) -> None:
    service, _, _ = _service(tmp_path / "settings.json")
    with pytest.raises(errors.InvalidParams, match="no settings"):
        service.update({})


def test_the_view_has_one_typed_field_per_setting_and_follows_updates(tmp_path: Path) -> None:
    assert [field.name for field in msgspec.structs.fields(SettingsView)] == list(schema.SPECS)
    service, _, _ = _service(tmp_path / "settings.json")
    assert service.view() == SettingsView(
        node_name="",
        log_level="info",
        proxy_header_timeout_s=120.0,
        proxy_first_content_timeout_s=120.0,
        proxy_pinned_node=None,
    )
    before = service.view()
    service.update({"proxy_pinned_node": "node-b", "proxy_header_timeout_s": 5})
    assert service.view().proxy_pinned_node == "node-b"
    assert service.view().proxy_header_timeout_s == 5.0
    assert before.proxy_pinned_node is None, "a view never changes once handed out"
    with pytest.raises(AttributeError):
        service.view().node_name = "x"  # type: ignore[misc]


def test_every_description_is_a_sentence() -> None:
    for spec in schema.SCHEMA:
        assert spec.description[:1].isupper(), spec.key
        assert spec.description.endswith("."), spec.key


def test_listeners_hear_of_saved_changes_only(tmp_path: Path) -> None:
    service, _, _ = _service(tmp_path / "settings.json")
    heard: list[bool] = []
    service.add_listener(lambda: heard.append(service.view().lan_access))
    service.update({"lan_access": True})
    assert heard == [True]  # called once the change is in the view
    service.update({"lan_access": True})
    assert heard == [True]  # nothing changed, nobody told
