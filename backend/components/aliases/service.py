"""This computer's model aliases: list, set, remove, and the name-to-target map the routing
table carries to the front doors.

The aliases are read from the store once, on the first call or the first routing table, and
kept in memory; every change is written (durably) before memory changes. ``aliases()`` is read
by every routing table build without touching the store, so a change reaches the doors with the
next table; listeners (``add_listener``) are told at once, so a table at rest is built again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType

from backend.common.listeners import Listeners
from backend.common.tasks import TaskSet
from backend.components.aliases.rules import alias_name, check_alias
from backend.components.aliases.store import AliasStore
from backend.core.clock import Clock
from backend.protocol import errors
from backend.protocol.types.aliases import ModelAlias

log = logging.getLogger(__name__)


class AliasesService:
    """Owns the aliases in memory and the task that reads them (until they are read)."""

    def __init__(self, store: AliasStore, *, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._entries: dict[str, ModelAlias] | None = None
        self._targets: Mapping[str, str] = MappingProxyType({})
        self._loading = asyncio.Lock()
        self._tasks = TaskSet("aliases")
        self._listeners = Listeners()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever the aliases change (set, removed, first loaded)."""
        self._listeners.add(listener)

    async def list_aliases(self) -> list[ModelAlias]:
        """Every alias, by name."""
        entries = await self._loaded()
        return [entries[name] for name in sorted(entries)]

    async def set_alias(self, name: str, target: str) -> ModelAlias:
        """Let ``name`` reach the model ``target`` (re-pointing an existing alias);
        ``InvalidParams`` naming the broken rule, with nothing changed."""
        entries = await self._loaded()
        try:
            name, target = check_alias(self._targets, name, target)
        except ValueError as exc:
            raise errors.InvalidParams(f"Invalid params for models:alias-set: {exc}") from None
        alias = ModelAlias(name=name, target=target, created_at=self._clock.wall())
        await self._store.put(alias)
        entries[name] = alias
        self._changed(entries)
        log.info("model alias %s now stands for %s", name, target)
        return alias

    async def remove_alias(self, name: str) -> ModelAlias:
        """Forget the alias ``name``; ``NotFound`` when there is none."""
        entries = await self._loaded()
        try:
            key = alias_name(name)
        except ValueError as exc:
            raise errors.InvalidParams(f"Invalid params for models:alias-remove: {exc}") from None
        alias = entries.get(key)
        if alias is None:
            raise errors.NotFound(f"no model alias {key!r} (see `pair model aliases`)")
        await self._store.delete(key)
        del entries[key]
        self._changed(entries)
        log.info("model alias %s (for %s) removed", key, alias.target)
        return alias

    def aliases(self) -> Mapping[str, str]:
        """Alias to the model it stands for, read-only (empty until read; the first call
        starts reading)."""
        if self._entries is None and not self._tasks:
            self._tasks.spawn(self._loaded(), name="load")
        return self._targets

    async def close(self) -> None:
        """Stop reading the aliases if that is still under way."""
        await self._tasks.close()

    async def _loaded(self) -> dict[str, ModelAlias]:
        async with self._loading:
            if self._entries is None:
                entries = {alias.name: alias for alias in await self._store.load()}
                self._entries = entries
                self._changed(entries)
            return self._entries

    def _changed(self, entries: dict[str, ModelAlias]) -> None:
        self._targets = MappingProxyType({name: a.target for name, a in entries.items()})
        self._listeners.notify()
