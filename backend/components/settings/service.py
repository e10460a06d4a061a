"""The settings service: loads, validates, persists atomically (0600), announces changes and
keeps a typed view of the values."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from backend.common.files import set_aside, write_private_atomic
from backend.common.listeners import Listeners
from backend.components.settings import schema
from backend.components.settings.view import SettingsView
from backend.core.clock import Clock
from backend.protocol import errors
from backend.protocol.types.settings import SettingsSnapshot, SettingValue

log = logging.getLogger(__name__)

CORRUPT_ERROR_ID = "settings:corrupt"
# Puts changed values into effect (a door on its new port); raises to refuse them.
Applier = Callable[[Mapping[str, SettingValue]], Awaitable[None]]


class SettingsService:
    """Owns ``settings.json``. Unknown keys found in the file are kept when it is rewritten."""

    def __init__(
        self,
        path: Path,
        *,
        clock: Clock,
        on_change: Callable[[SettingsSnapshot], None],
        on_corrupt: Callable[[str], None],
    ) -> None:
        self._path = path
        self._clock = clock
        self._on_change = on_change
        self._on_corrupt = on_corrupt
        self._listeners = Listeners()
        self._values = schema.defaults()
        self._view = SettingsView.of(self._values)
        self._unknown: dict[str, object] = {}
        self._appliers: list[tuple[frozenset[str], Applier]] = []
        self._applying = asyncio.Lock()

    def load(self) -> None:
        """Read the file; a corrupt file is set aside and defaults are used."""
        self._remove_stale_temp_files()
        try:
            raw = json.loads(self._path.read_bytes())
            if not isinstance(raw, dict):
                raise ValueError("the top level is not a JSON object")
        except FileNotFoundError:
            return
        except (ValueError, UnicodeDecodeError) as exc:
            moved = set_aside(self._path, "corrupt", int(self._clock.wall()))
            log.warning("settings file %s is unreadable (%s); moved to %s", self._path, exc, moved)
            self._on_corrupt(
                f"The settings file could not be read ({exc}); it was kept as {moved.name} "
                "and defaults are in use."
            )
            return
        self._adopt(raw)

    def view(self) -> SettingsView:
        """Every value, typed (a new frozen view after each change)."""
        return self._view

    def snapshot(self) -> SettingsSnapshot:
        """All values and the schema."""
        return SettingsSnapshot(values=dict(self._values), schema=list(schema.SCHEMA))

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every saved change (its values already in ``view()``)."""
        self._listeners.add(listener)

    def add_applier(self, keys: frozenset[str], apply: Applier) -> None:
        """Have ``apply(changed)`` put a change of any of ``keys`` into effect before it is
        saved (``apply_update``): what it raises refuses the whole update, nothing saved."""
        self._appliers.append((keys, apply))

    async def apply_update(self, values: Mapping[str, object]) -> SettingsSnapshot:
        """``update``, with every changed value an applier owns put into effect first (one
        update at a time, so two cannot apply crossed values)."""
        async with self._applying:
            checked = self._checked(values)
            changed = {k: v for k, v in checked.items() if self._values[k] != v}
            for keys, apply in self._appliers:
                owned = {k: v for k, v in changed.items() if k in keys}
                if owned:
                    await apply(owned)
            return self.update(values)

    def _checked(self, values: Mapping[str, object]) -> dict[str, SettingValue]:
        if not values:
            raise errors.InvalidParams("Invalid params: no settings given")
        try:
            return schema.validate_all(values)
        except ValueError as exc:
            raise errors.InvalidParams(f"Invalid params: {exc}") from None

    def update(self, values: Mapping[str, object]) -> SettingsSnapshot:
        """Validate every value, then apply and persist them together (all or nothing)."""
        checked = self._checked(values)
        changed = {k: v for k, v in checked.items() if self._values[k] != v}
        if changed:
            self._save({**self._values, **changed})
            self._values.update(changed)
            self._view = SettingsView.of(self._values)
            self._on_change(self.snapshot())
            self._listeners.notify()
        return self.snapshot()

    def _adopt(self, raw: dict[str, object]) -> None:
        for key, value in raw.items():
            if key not in schema.SPECS:
                self._unknown[key] = value
                continue
            try:
                self._values[key] = schema.validate(key, value)
            except ValueError as exc:
                log.warning("settings file: %s; using the default", exc)
        self._view = SettingsView.of(self._values)

    def _remove_stale_temp_files(self) -> None:
        # A write cut by a crash leaves its temp file (the real file is intact); only this
        # broker, which holds the data dir's lock, writes here, so none is in use now.
        for stale in self._path.parent.glob(f".{self._path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                stale.unlink()

    def _save(self, values: dict[str, SettingValue]) -> None:
        document = {**self._unknown, **values}
        write_private_atomic(self._path, json.dumps(document, indent=2, sort_keys=True).encode())
