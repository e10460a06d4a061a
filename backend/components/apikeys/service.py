"""The LAN API keys: create (the secret is returned once, only its hash kept), list, revoke,
and when each was last used.

The keys are read from the store once, on the first call or the first routing table, whichever
comes first, and kept in memory; every change is written (durably) before memory changes. The
routing table reads ``hashes()`` and ``door_keys()`` every 0.1 s without touching the store, so
a revoked key leaves the front doors with the next table. The doors report key use in batches
(``proxy:keys-used``); use times are written one batch per transaction, never one per request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType

import msgspec

from backend.common.listeners import Listeners
from backend.common.secret_hash import hash_secret
from backend.common.tasks import TaskSet
from backend.components.apikeys.secret import key_name, new_key_id, new_secret, public_prefix
from backend.components.apikeys.store import ApiKeyStore, StoredKey
from backend.core.clock import Clock
from backend.protocol import errors
from backend.protocol.proxy import DoorKey
from backend.protocol.types.apikeys import (
    API_KEY_SCOPES,
    ApiKeyCreated,
    ApiKeyId,
    ApiKeyInfo,
    ApiKeyScope,
    KeysUsed,
)

log = logging.getLogger(__name__)


class ApiKeysService:
    """Owns the keys in memory, the task that reads them (until they are read) and the one
    that writes use times (while some wait)."""

    def __init__(
        self,
        store: ApiKeyStore,
        *,
        clock: Clock,
        secrets: Callable[[], str] = new_secret,
        ids: Callable[[], str] = new_key_id,
    ) -> None:
        self._store = store
        self._clock = clock
        self._secrets = secrets
        self._ids = ids
        self._keys: dict[ApiKeyId, StoredKey] | None = None
        self._hashes: frozenset[str] = frozenset()
        self._door_keys: Mapping[str, DoorKey] = MappingProxyType({})
        self._unwritten: dict[ApiKeyId, float] = {}
        self._writing = False
        self._loading = asyncio.Lock()
        self._tasks = TaskSet("apikeys")
        self._listeners = Listeners()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever the keys change (created, revoked, first loaded)."""
        self._listeners.add(listener)

    async def create(self, name: str, scope: ApiKeyScope = "inference") -> ApiKeyCreated:
        """A new key named ``name`` that may do what ``scope`` says; its secret is in this
        answer and nowhere else."""
        try:
            checked = key_name(name)
        except ValueError as exc:
            raise errors.InvalidParams(f"Invalid params for apikeys:create: {exc}") from None
        if scope not in API_KEY_SCOPES:
            choices = " or ".join(API_KEY_SCOPES)
            raise errors.InvalidParams(f"Invalid params for apikeys:create: scope is {choices}")
        keys = await self._loaded()
        secret = self._secrets()
        key_id = self._fresh_id(keys)
        info = ApiKeyInfo(
            id=key_id,
            name=checked,
            prefix=public_prefix(secret),
            created_at=self._clock.wall(),
            scope=scope,
        )
        stored = StoredKey(info, hash_secret(secret))
        await self._store.insert(stored)
        keys[key_id] = stored
        self._changed(keys)
        log.info("LAN API key %s (%s, scope %s) created", key_id, checked, scope)
        return ApiKeyCreated(key=info, secret=secret)

    async def list_keys(self) -> list[ApiKeyInfo]:
        """Every key, oldest first (no secrets: they are not kept)."""
        keys = await self._loaded()
        return [key.info for key in keys.values()]

    async def revoke(self, key_id: ApiKeyId) -> ApiKeyInfo:
        """Forget the key ``key_id``; the front doors refuse it from the next routing table."""
        keys = await self._loaded()
        stored = keys.get(key_id)
        if stored is None:
            raise errors.NotFound(f"no API key with id {key_id!r} (see `pair api-key list`)")
        await self._store.delete(key_id)
        del keys[key_id]
        self._changed(keys)
        log.info("LAN API key %s (%s) revoked", key_id, stored.info.name)
        return stored.info

    def hashes(self) -> frozenset[str]:
        """The hash of every key (empty until they are read; the first call starts reading)."""
        if self._keys is None and not self._tasks:
            self._tasks.spawn(self._loaded(), name="load")
        return self._hashes

    def door_keys(self) -> Mapping[str, DoorKey]:
        """Each key's name and scope by its hash, as the doors check them (same as ``hashes``:
        empty until read)."""
        return self._door_keys

    def keys_used(self, report: KeysUsed) -> None:
        """Note when the keys of ``report`` were last used (hashes of revoked keys are
        ignored); the times are written in the background, one transaction per batch."""
        if self._keys is None:
            return  # the doors know no key before they are read
        by_hash = {key.hash: key for key in self._keys.values()}
        for hashed, at in report.used.items():
            stored = by_hash.get(hashed)
            last = stored.info.last_used_at if stored is not None else None
            if stored is None or (last is not None and last >= at):
                continue
            info = msgspec.structs.replace(stored.info, last_used_at=at)
            self._keys[info.id] = StoredKey(info, stored.hash)
            self._unwritten[info.id] = at
        if self._unwritten and not self._writing:
            self._writing = True
            self._tasks.spawn(self._write_use(), name="write-use")

    async def close(self) -> None:
        """Stop reading the keys if that is still under way; write the use times that wait."""
        await self._tasks.close()
        if self._unwritten:
            await self._write_use()

    async def _write_use(self) -> None:
        # Reports that arrive while a batch is written are merged into the next one.
        try:
            while self._unwritten:
                batch, self._unwritten = self._unwritten, {}
                try:
                    await self._store.record_use(batch)
                except asyncio.CancelledError:
                    self._unwritten = {**batch, **self._unwritten}  # for close() to write
                    raise
                except Exception:
                    log.exception("could not record when %d API keys were used", len(batch))
                    return
        finally:
            self._writing = False

    async def _loaded(self) -> dict[ApiKeyId, StoredKey]:
        async with self._loading:
            if self._keys is None:
                keys = {key.info.id: key for key in await self._store.load()}
                self._keys = keys
                self._changed(keys)
            return self._keys

    def _changed(self, keys: dict[ApiKeyId, StoredKey]) -> None:
        self._hashes = frozenset(key.hash for key in keys.values())
        door_keys = {
            key.hash: DoorKey(name=key.info.name, scope=key.info.scope) for key in keys.values()
        }
        self._door_keys = MappingProxyType(door_keys)
        self._listeners.notify()

    def _fresh_id(self, keys: dict[ApiKeyId, StoredKey]) -> ApiKeyId:
        while True:
            key_id = ApiKeyId(self._ids())
            if key_id not in keys:
                return key_id
