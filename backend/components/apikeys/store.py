"""The ``api_keys`` table: each key's id, name, public prefix, hash, scope and times (never a
secret)."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from backend.core.store import Row, Store
from backend.protocol.types.apikeys import ApiKeyId, ApiKeyInfo

_COLUMNS = "id, name, prefix, hash, created_at, last_used_at, scope"


class StoredKey(msgspec.Struct, frozen=True):
    """One key as stored: what is listed, and the hash the front door checks."""

    info: ApiKeyInfo
    hash: str


class ApiKeyStore:
    """Reads and writes the ``api_keys`` table; owns no tasks (every call is one transaction).

    Creating and revoking are durable: a key that was revoked must stay revoked after a power
    cut. Use times are not: losing the last few seconds of them to a power cut is harmless.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    async def load(self) -> list[StoredKey]:
        """Every key, oldest first."""
        rows = await self._store.fetch_all(
            f"SELECT {_COLUMNS} FROM api_keys ORDER BY created_at, id"
        )
        return [_key(row) for row in rows]

    async def insert(self, key: StoredKey) -> None:
        """Add ``key``."""
        info = key.info
        values = (
            info.id,
            info.name,
            info.prefix,
            key.hash,
            info.created_at,
            info.last_used_at,
            info.scope,
        )
        await self._store.transaction(
            [(f"INSERT INTO api_keys ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", values)],
            durable=True,
        )

    async def delete(self, key_id: ApiKeyId) -> None:
        """Remove the key ``key_id`` (nothing if there is none)."""
        await self._store.transaction(
            [("DELETE FROM api_keys WHERE id = ?", (key_id,))], durable=True
        )

    async def record_use(self, used: Mapping[ApiKeyId, float]) -> None:
        """Set each key's ``last_used_at`` (a later time only), all in one transaction."""
        statement = (
            "UPDATE api_keys SET last_used_at = ? WHERE id = ? "
            "AND (last_used_at IS NULL OR last_used_at < ?)"
        )
        await self._store.transaction(
            [(statement, (at, key_id, at)) for key_id, at in used.items()], durable=False
        )


def _key(row: Row) -> StoredKey:
    key_id, name, prefix, hashed, created_at, last_used_at, scope = row
    info = ApiKeyInfo(
        id=ApiKeyId(str(key_id)),
        name=str(name),
        prefix=str(prefix),
        created_at=float(created_at),
        last_used_at=float(last_used_at) if last_used_at is not None else None,
        # A scope this version does not know grants the least.
        scope="admin" if scope == "admin" else "inference",
    )
    return StoredKey(info, str(hashed))
