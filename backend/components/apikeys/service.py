"""The LAN API keys: create (the secret is returned once, only its hash kept), list, revoke.

The keys are read from the store once, on the first call or the first routing table, whichever
comes first, and kept in memory; every change is written (durably) before memory changes. The
routing table reads ``hashes()`` every 0.1 s without touching the store, so a revoked key leaves
the front doors with the next table.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from backend.common.secret_hash import hash_secret
from backend.common.tasks import TaskSet
from backend.components.apikeys.secret import key_name, new_key_id, new_secret, public_prefix
from backend.components.apikeys.store import ApiKeyStore, StoredKey
from backend.core.clock import Clock
from backend.protocol import errors
from backend.protocol.types.apikeys import ApiKeyCreated, ApiKeyId, ApiKeyInfo

log = logging.getLogger(__name__)


class ApiKeysService:
    """Owns the keys in memory and, until they are read, the one task that reads them."""

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
        self._loading = asyncio.Lock()
        self._tasks = TaskSet("apikeys")

    async def create(self, name: str) -> ApiKeyCreated:
        """A new key named ``name``; its secret is in this answer and nowhere else."""
        try:
            checked = key_name(name)
        except ValueError as exc:
            raise errors.InvalidParams(f"Invalid params for apikeys:create: {exc}") from None
        keys = await self._loaded()
        secret = self._secrets()
        key_id = self._fresh_id(keys)
        info = ApiKeyInfo(
            id=key_id, name=checked, prefix=public_prefix(secret), created_at=self._clock.wall()
        )
        stored = StoredKey(info, hash_secret(secret))
        await self._store.insert(stored)
        keys[key_id] = stored
        self._changed(keys)
        log.info("LAN API key %s (%s) created", key_id, checked)
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

    async def close(self) -> None:
        """Stop reading the keys if that is still under way."""
        await self._tasks.close()

    async def _loaded(self) -> dict[ApiKeyId, StoredKey]:
        async with self._loading:
            if self._keys is None:
                keys = {key.info.id: key for key in await self._store.load()}
                self._keys = keys
                self._changed(keys)
            return self._keys

    def _changed(self, keys: dict[ApiKeyId, StoredKey]) -> None:
        self._hashes = frozenset(key.hash for key in keys.values())

    def _fresh_id(self, keys: dict[ApiKeyId, StoredKey]) -> ApiKeyId:
        while True:
            key_id = ApiKeyId(self._ids())
            if key_id not in keys:
                return key_id
