"""The ``replicas_*`` settings: their defaults, the bounds and choices the schema refuses
beyond, and the typed view the replica planner reads."""

from __future__ import annotations

import pytest

from backend.components.settings import schema
from backend.components.settings.view import SettingsView


def test_the_defaults_are_automatic_ten_seconds_five_minutes_and_three_computers() -> None:
    view = SettingsView.of(schema.defaults())
    assert (
        view.replicas_mode,
        view.replicas_target_wait_s,
        view.replicas_ttl_s,
        view.replicas_max_per_model,
    ) == ("auto", 10.0, 300.0, 3)


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("replicas_mode", "sometimes", "must be one of auto, on, off"),
        ("replicas_target_wait_s", 0.5, "at least 1"),
        ("replicas_target_wait_s", 601, "at most 600"),
        ("replicas_ttl_s", 29, "at least 30"),
        ("replicas_ttl_s", 86401, "at most 86400"),
        ("replicas_max_per_model", 0, "at least 1"),
        ("replicas_max_per_model", 17, "at most 16"),
        ("replicas_max_per_model", 2.5, "expects an integer"),
    ],
)
def test_values_outside_the_schema_are_refused_with_the_reason(
    key: str, value: object, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        schema.validate(key, value)


def test_the_view_carries_the_checked_values_typed() -> None:
    values = schema.defaults() | schema.validate_all(
        {
            "replicas_mode": "off",
            "replicas_target_wait_s": 30,
            "replicas_ttl_s": 1800,
            "replicas_max_per_model": 16,
        }
    )
    view = SettingsView.of(values)
    assert view.replicas_mode == "off"
    assert view.replicas_target_wait_s == 30.0 and isinstance(view.replicas_target_wait_s, float)
    assert (view.replicas_ttl_s, view.replicas_max_per_model) == (1800.0, 16)
    with pytest.raises(TypeError, match="not auto, on or off"):
        SettingsView.of(schema.defaults() | {"replicas_mode": "sometimes"})
