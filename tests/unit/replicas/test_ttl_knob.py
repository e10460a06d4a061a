"""The replica TTL's test knob: ``PAIR_REPLICAS_TTL_S`` overrules the setting, or is ignored."""

from __future__ import annotations

from backend.components.replicas.status import TTL_ENV, settings_of, ttl_from_environment
from backend.components.settings import schema
from backend.components.settings.view import SettingsView

_SET = SettingsView.of({**schema.defaults(), "replicas_ttl_s": 1800.0})


def _view() -> SettingsView:
    return _SET


def test_a_positive_number_of_seconds_overrules_the_setting() -> None:
    view = ttl_from_environment(_view, {TTL_ENV: "8"})
    assert settings_of(view()).policy.ttl_s == 8.0
    assert view().replicas_ttl_s == 8.0 and view().replicas_mode == _SET.replicas_mode
    assert settings_of(_view()).policy.ttl_s == 1800.0  # the setting itself is untouched


def test_without_a_usable_value_the_setting_stands() -> None:
    for environ in ({}, {TTL_ENV: "0"}, {TTL_ENV: "-3"}, {TTL_ENV: "soon"}, {TTL_ENV: "inf"}):
        assert ttl_from_environment(_view, environ) is _view, environ
