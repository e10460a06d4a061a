"""LAN API keys have a scope (inference unless admin is asked for), keys of older databases
become inference keys, and the doors' reports of key use set ``last_used_at`` in batches."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from backend.common.secret_hash import hash_secret
from backend.components.apikeys.service import ApiKeysService
from backend.components.apikeys.store import ApiKeyStore
from backend.components.proxy.table import LanAccess, build_table
from backend.core.store import MIGRATIONS, Store
from backend.protocol import errors
from backend.protocol.proxy import DoorKey, ProxyTargets
from backend.protocol.types.apikeys import ApiKeyId, KeysUsed
from tests.fakes import FakeClock

# The schema before keys had scopes: every migration up to the one that added them.
SCOPES_MIGRATION = next(i for i, sql in enumerate(MIGRATIONS) if "COLUMN scope" in sql)
OLD_SCHEMA = MIGRATIONS[:SCOPES_MIGRATION]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = Store(tmp_path / "pair.db")
    await store.open()
    yield store
    await store.close()


class CountingKeyStore(ApiKeyStore):
    """Counts the transactions that record use, and can hold them until released."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.use_writes: list[dict[ApiKeyId, float]] = []
        self.release = asyncio.Event()
        self.release.set()

    async def record_use(self, used: Mapping[ApiKeyId, float]) -> None:
        self.use_writes.append(dict(used))
        await self.release.wait()
        await super().record_use(used)


async def test_a_key_is_inference_unless_admin_is_asked_for(store: Store) -> None:
    service = ApiKeysService(ApiKeyStore(store), clock=FakeClock())
    plain = await service.create("laptop")
    admin = await service.create("ops", "admin")
    assert (plain.key.scope, admin.key.scope) == ("inference", "admin")
    assert service.door_keys() == {
        hash_secret(plain.secret): DoorKey(name="laptop", scope="inference"),
        hash_secret(admin.secret): DoorKey(name="ops", scope="admin"),
    }
    again = ApiKeysService(ApiKeyStore(store), clock=FakeClock())
    assert {key.name: key.scope for key in await again.list_keys()} == {
        "laptop": "inference",
        "ops": "admin",
    }
    with pytest.raises(errors.InvalidParams, match="scope is inference or admin"):
        await service.create("root", "root")  # type: ignore[arg-type]
    await service.revoke(admin.key.id)
    assert list(service.door_keys().values()) == [DoorKey(name="laptop")]


async def test_keys_of_a_database_made_before_scopes_become_inference_keys(
    tmp_path: Path,
) -> None:
    old = Store(tmp_path / "pair.db", migrations=OLD_SCHEMA)
    await old.open()
    await old.execute(
        "INSERT INTO api_keys (id, name, prefix, hash, created_at) VALUES (?, ?, ?, ?, ?)",
        ("k1", "old laptop", "pair-AbCd", "h" * 64, 100.0),
    )
    await old.close()
    store = Store(tmp_path / "pair.db")
    await store.open()
    try:
        keys = await ApiKeysService(ApiKeyStore(store), clock=FakeClock()).list_keys()
        assert [(key.name, key.scope, key.last_used_at) for key in keys] == [
            ("old laptop", "inference", None)
        ]
        columns = {row[1] for row in await store.fetch_all("PRAGMA table_info(jobs)")}
        assert {"client", "client_address"} <= columns
    finally:
        await store.close()


async def test_reported_use_sets_last_used_at_and_survives_a_restart(store: Store) -> None:
    service = ApiKeysService(ApiKeyStore(store), clock=FakeClock())
    created = await service.create("laptop")
    other = await service.create("phone")
    hashed = hash_secret(created.secret)
    service.keys_used(KeysUsed(used={hashed: 2000.0, "not-a-key": 2001.0}))
    service.keys_used(KeysUsed(used={hashed: 1500.0}))  # older than what is known: ignored
    await service.close()
    listed = {key.name: key.last_used_at for key in await service.list_keys()}
    assert listed == {"laptop": 2000.0, "phone": None}
    again = ApiKeysService(ApiKeyStore(store), clock=FakeClock())
    stored = {key.id: key.last_used_at for key in await again.list_keys()}
    assert stored == {created.key.id: 2000.0, other.key.id: None}


async def test_reports_that_arrive_during_a_write_share_the_next_one(store: Store) -> None:
    keys = CountingKeyStore(store)
    service = ApiKeysService(keys, clock=FakeClock())
    laptop = hash_secret((await service.create("laptop")).secret)
    phone = hash_secret((await service.create("phone")).secret)
    keys.release.clear()
    service.keys_used(KeysUsed(used={laptop: 10.0}))
    await asyncio.sleep(0)  # the first write starts and waits
    for at in (11.0, 12.0, 13.0):
        service.keys_used(KeysUsed(used={laptop: at, phone: at}))
    keys.release.set()
    await service.close()
    assert len(keys.use_writes) == 2, "one transaction per batch, not one per report"
    ids = {key.name: key.id for key in await service.list_keys()}
    assert keys.use_writes[1] == {ids["laptop"]: 13.0, ids["phone"]: 13.0}
    rows: dict[str, float] = dict(await store.fetch_all("SELECT name, last_used_at FROM api_keys"))
    assert rows == {"laptop": 13.0, "phone": 13.0}


async def test_use_reported_before_the_keys_are_read_is_ignored(store: Store) -> None:
    service = ApiKeysService(ApiKeyStore(store), clock=FakeClock())
    service.keys_used(KeysUsed(used={"h": 1.0}))
    assert await service.list_keys() == []
    await service.close()


def test_names_and_scopes_reach_the_worker_only_while_lan_access_is_on() -> None:
    keys = {"h1": DoorKey(name="laptop"), "h2": DoorKey(name="ops", scope="admin")}

    def table(enabled: bool) -> ProxyTargets:
        lan = LanAccess(enabled=enabled, key_hashes=keys.keys(), door_keys=keys)
        return build_table(node_id="self", local={}, nodes=[], loads={}, generation=1, lan=lan)

    assert table(True).api_keys == keys
    assert table(False).api_keys == {}
