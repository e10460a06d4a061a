"""The aliases service over a real SQLite store: set, list, re-point, remove, survive a
restart; bad input is refused with the rule and changes nothing; the RPC methods route."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest

from backend.components.aliases import rpc
from backend.components.aliases.service import AliasesService
from backend.components.aliases.store import AliasStore
from backend.core.rpc import Dispatcher
from backend.core.store import Store
from backend.protocol import errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.aliases import MAX_ALIASES, ModelAlias
from tests.fakes import FakeClock


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = Store(tmp_path / "pair.db")
    await store.open()
    yield store
    await store.close()


def _service(store: Store, seen: list[dict[str, str]] | None = None) -> AliasesService:
    service = AliasesService(AliasStore(store), clock=FakeClock(start=500.0))
    if seen is not None:
        service.add_listener(lambda: seen.append(dict(service.aliases())))
    return service


async def test_set_writes_the_alias_and_tells_the_routing_table(store: Store) -> None:
    seen: list[dict[str, str]] = []
    service = _service(store, seen)
    alias = await service.set_alias("  coder ", " qwen2.5:7b ")

    assert alias == ModelAlias(name="coder", target="qwen2.5:7b", created_at=500.0)
    rows = await store.fetch_all("SELECT name, target, created_at FROM model_aliases")
    assert rows == [("coder", "qwen2.5:7b", 500.0)]
    assert dict(service.aliases()) == {"coder": "qwen2.5:7b"}
    assert seen[-1] == {"coder": "qwen2.5:7b"}


async def test_aliases_are_listed_by_name_repointed_and_survive_a_restart(store: Store) -> None:
    service = _service(store)
    await service.set_alias("zed", "llama3")
    await service.set_alias("coder", "qwen2.5:7b")
    await service.set_alias("coder", "qwen2.5-coder:7b")

    again = _service(store)
    listed = await again.list_aliases()
    assert [(a.name, a.target) for a in listed] == [
        ("coder", "qwen2.5-coder:7b"),
        ("zed", "llama3"),
    ]
    assert dict(again.aliases()) == {"coder": "qwen2.5-coder:7b", "zed": "llama3"}


async def test_the_first_routing_table_read_starts_loading(store: Store) -> None:
    await _service(store).set_alias("coder", "qwen2.5:7b")
    fresh = _service(store)
    assert dict(fresh.aliases()) == {}  # not read yet: the doors know none for a moment
    for _ in range(500):  # the read it started, alone (no other call reads them)
        if fresh.aliases():
            break
        await asyncio.sleep(0.01)
    assert dict(fresh.aliases()) == {"coder": "qwen2.5:7b"}
    await fresh.close()


@pytest.mark.parametrize(
    ("name", "target", "reason"),
    [
        ("my coder", "qwen", "no spaces"),
        ("", "qwen", "1-200"),
        ("qwen", "qwen", "may not name itself"),
        ("c", "coder", "itself an alias"),
        ("qwen2.5:7b", "llama3", "stands for"),
    ],
)
async def test_bad_input_is_refused_with_the_rule_and_changes_nothing(
    store: Store, name: str, target: str, reason: str
) -> None:
    service = _service(store)
    await service.set_alias("coder", "qwen2.5:7b")
    with pytest.raises(errors.InvalidParams, match=reason):
        await service.set_alias(name, target)
    rows = await store.fetch_all("SELECT name, target FROM model_aliases")
    assert rows == [("coder", "qwen2.5:7b")]
    assert dict(service.aliases()) == {"coder": "qwen2.5:7b"}


async def test_the_count_is_bounded(store: Store) -> None:
    service = _service(store)
    for index in range(MAX_ALIASES):
        await service.set_alias(f"a{index}", "model")
    with pytest.raises(errors.InvalidParams, match=f"at most {MAX_ALIASES}"):
        await service.set_alias("one-more", "model")
    assert len(await store.fetch_all("SELECT name FROM model_aliases")) == MAX_ALIASES


async def test_remove_forgets_the_alias_and_an_unknown_one_is_not_found(store: Store) -> None:
    seen: list[dict[str, str]] = []
    service = _service(store, seen)
    await service.set_alias("coder", "qwen2.5:7b")
    removed = await service.remove_alias(" coder ")
    assert removed.target == "qwen2.5:7b"
    assert await store.fetch_all("SELECT name FROM model_aliases") == []
    assert dict(service.aliases()) == {} and seen[-1] == {}
    with pytest.raises(errors.NotFound, match="no model alias 'coder'"):
        await service.remove_alias("coder")


async def test_the_rpc_methods_route_to_the_service_and_errors_keep_their_code(
    store: Store,
) -> None:
    dispatcher = Dispatcher()
    rpc.register(dispatcher, _service(store))
    peer = cast(RpcPeer, None)  # the alias methods do not look at who calls
    added = await dispatcher("models:alias-set", {"name": "coder", "target": "qwen2.5:7b"}, peer)
    assert added == ModelAlias(name="coder", target="qwen2.5:7b", created_at=500.0)
    listing = await dispatcher(methods.MODELS_ALIASES.name, None, peer)
    assert [alias.name for alias in listing] == ["coder"]
    with pytest.raises(errors.InvalidParams, match=r"models:alias-set.*name"):
        await dispatcher("models:alias-set", {"target": "qwen2.5:7b"}, peer)
    with pytest.raises(errors.NotFound):
        await dispatcher("models:alias-remove", {"name": "nope"}, peer)
    removed = await dispatcher("models:alias-remove", {"name": "coder"}, peer)
    assert removed.name == "coder"


async def test_listeners_hear_of_each_set_and_remove(store: Store) -> None:
    service = _service(store)
    heard: list[str] = []
    service.add_listener(lambda: heard.append("changed"))
    await service.set_alias("coder", "qwen2.5:7b")
    count = len(heard)
    assert count >= 1
    await service.list_aliases()
    assert len(heard) == count
    await service.remove_alias("coder")
    assert len(heard) == count + 1
