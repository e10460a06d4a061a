"""LAN API keys: the secret is answered once and only its hash is stored; list, revoke, names."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from backend.common.secret_hash import hash_secret
from backend.components.apikeys.secret import (
    PUBLIC_PREFIX_LENGTH,
    key_name,
    new_secret,
    public_prefix,
)
from backend.components.apikeys.service import ApiKeysService
from backend.components.apikeys.store import ApiKeyStore
from backend.core.store import Store
from backend.protocol import errors
from backend.protocol.types.apikeys import ApiKeyId
from tests.fakes import FakeClock


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = Store(tmp_path / "pair.db")
    await store.open()
    yield store
    await store.close()


def _service(store: Store, clock: FakeClock | None = None) -> ApiKeysService:
    return ApiKeysService(ApiKeyStore(store), clock=clock or FakeClock())


def test_a_secret_is_256_random_bits_after_a_recognisable_prefix() -> None:
    secrets = {new_secret() for _ in range(50)}
    assert len(secrets) == 50
    for secret in secrets:
        assert secret.startswith("pair-") and len(secret) == len("pair-") + 43
    secret = next(iter(secrets))
    assert public_prefix(secret) == secret[:PUBLIC_PREFIX_LENGTH] == secret[:9]


async def test_create_answers_the_secret_once_and_stores_only_its_hash(store: Store) -> None:
    service = _service(store, FakeClock(start=1000.0))
    created = await service.create("  laptop  ")

    assert created.key.name == "laptop"
    assert created.key.prefix == created.secret[:9]
    assert (created.key.created_at, created.key.last_used_at) == (1000.0, None)
    assert "secret=<hidden>" in repr(created) and created.secret not in repr(created)
    rows = await store.fetch_all("SELECT id, name, prefix, hash FROM api_keys")
    assert rows == [(created.key.id, "laptop", created.key.prefix, hash_secret(created.secret))]
    stored = repr(await store.fetch_all("SELECT * FROM api_keys"))
    assert created.secret not in stored and created.secret[9:] not in stored
    assert service.hashes() == {hash_secret(created.secret)}


async def test_keys_are_listed_oldest_first_and_survive_a_restart(store: Store) -> None:
    clock = FakeClock(start=10.0)
    service = _service(store, clock)
    first = await service.create("laptop")
    clock.now = 20.0
    second = await service.create("phone")

    again = _service(store)
    listed = await again.list_keys()
    assert listed == [first.key, second.key]
    assert again.hashes() == {hash_secret(first.secret), hash_secret(second.secret)}


async def test_revoke_removes_the_key_and_its_hash_at_once(store: Store) -> None:
    service = _service(store)
    kept = await service.create("laptop")
    gone = await service.create("phone")

    revoked = await service.revoke(gone.key.id)

    assert revoked == gone.key
    assert await service.list_keys() == [kept.key]
    assert service.hashes() == {hash_secret(kept.secret)}
    assert await _service(store).list_keys() == [kept.key], "the revocation is stored"
    with pytest.raises(errors.NotFound, match="no API key"):
        await service.revoke(gone.key.id)
    with pytest.raises(errors.NotFound):
        await service.revoke(ApiKeyId("nope"))


@pytest.mark.parametrize("name", ["", "   ", "x" * 65, "tab\there", "new\nline", "\x1b[31m"])
async def test_bad_names_are_invalid_params_and_nothing_is_stored(store: Store, name: str) -> None:
    service = _service(store)
    with pytest.raises(errors.InvalidParams, match="1-64 printable"):
        await service.create(name)
    assert await store.fetch_all("SELECT * FROM api_keys") == []


def test_names_are_trimmed_and_may_be_64_printable_characters() -> None:
    assert key_name(" Büro-PC (Anna) ") == "Büro-PC (Anna)"
    assert key_name("x" * 64) == "x" * 64


async def test_ids_are_unique_even_when_the_random_source_repeats(store: Store) -> None:
    ids = iter(["same", "same", "same", "other"])
    service = ApiKeysService(ApiKeyStore(store), clock=FakeClock(), ids=lambda: next(ids))
    first = await service.create("a")
    second = await service.create("b")
    assert (first.key.id, second.key.id) == ("same", "other")


async def test_the_routing_table_starts_reading_the_keys_and_sees_them_once_read(
    store: Store,
) -> None:
    created = await _service(store).create("laptop")
    service = _service(store)

    assert service.hashes() == frozenset(), "nothing is known before the first read"
    for _ in range(100):
        if service.hashes():
            break
        await asyncio.sleep(0.01)
    assert service.hashes() == {hash_secret(created.secret)}
    await service.close()


async def test_listeners_hear_of_each_change_to_the_keys(store: Store) -> None:
    service = _service(store)
    heard: list[str] = []
    service.add_listener(lambda: heard.append("changed"))
    created = await service.create("laptop")
    assert heard  # the first load and the new key (the routing table looks again)
    count = len(heard)
    await service.list_keys()
    assert len(heard) == count  # reading changes nothing
    await service.revoke(created.key.id)
    assert len(heard) == count + 1
