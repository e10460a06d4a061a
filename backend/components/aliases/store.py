"""The ``model_aliases`` table: each alias's name, the model it stands for, and when it was
set."""

from __future__ import annotations

from backend.core.store import Row, Store
from backend.protocol.types.aliases import ModelAlias


class AliasStore:
    """Reads and writes ``model_aliases``; owns no tasks (every call is one durable
    transaction: an alias the user removed must stay removed after a power cut)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def load(self) -> list[ModelAlias]:
        """Every alias, by name."""
        rows = await self._store.fetch_all(
            "SELECT name, target, created_at FROM model_aliases ORDER BY name"
        )
        return [_alias(row) for row in rows]

    async def put(self, alias: ModelAlias) -> None:
        """Add ``alias``, or point an existing one with its name elsewhere."""
        statement = (
            "INSERT INTO model_aliases (name, target, created_at) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET target = excluded.target, "
            "created_at = excluded.created_at"
        )
        values = (alias.name, alias.target, alias.created_at)
        await self._store.transaction([(statement, values)], durable=True)

    async def delete(self, name: str) -> None:
        """Remove the alias ``name`` (nothing if there is none)."""
        await self._store.transaction(
            [("DELETE FROM model_aliases WHERE name = ?", (name,))], durable=True
        )


def _alias(row: Row) -> ModelAlias:
    name, target, created_at = row
    return ModelAlias(name=str(name), target=str(target), created_at=float(created_at))
