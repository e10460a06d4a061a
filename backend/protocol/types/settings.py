"""Settings: the schema, the values and a change (``settings/*``)."""

from __future__ import annotations

from typing import Literal

from backend.protocol.types.base import Wire

SettingType = Literal["bool", "int", "float", "string", "enum"]
SettingValue = bool | int | float | str


class SettingSpec(Wire, frozen=True, kw_only=True):
    """One entry of the settings schema."""

    key: str
    type: SettingType
    default: SettingValue
    description: str
    choices: list[str] | None = None
    minimum: float | None = None
    maximum: float | None = None


class SettingsSnapshot(Wire, frozen=True, kw_only=True):
    """Answer to ``settings:get`` and ``settings:set``; also the ``settings:changed`` push."""

    values: dict[str, SettingValue]
    schema: list[SettingSpec]


class SettingsUpdate(Wire, frozen=True, kw_only=True):
    """Parameters of ``settings:set``: only the keys to change."""

    values: dict[str, SettingValue]
