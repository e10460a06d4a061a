"""A renamed method is still answered by its former name, and a client that subscribed by a
former name keeps getting the stream's pushes by the push's former name (older apps, scripts and
members keep working across a rename)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest

from backend.core.rpc import ClientHub, Dispatcher, NumberedStream
from backend.protocol import errors, methods, worker_methods
from backend.protocol.contract import Method, NoParams, Push
from backend.protocol.peer import RpcPeer


class Ticked(msgspec.Struct, frozen=True):
    seq: int


class Snapshot(msgspec.Struct, frozen=True):
    seq: int


TICKS_EVENT: Push[Ticked] = Push("ticks:event", Ticked, "numbered", former="tick/event")
TICKS_SUBSCRIBE = Method(
    "ticks:subscribe", NoParams, Snapshot, "snapshot, then events", former="tick/subscribe"
)
TICKS_UNSUBSCRIBE = Method("ticks:unsubscribe", NoParams, Snapshot, "no more events")


@dataclass
class Client:
    peer: RpcPeer
    pushes: list[tuple[str, Any]] = field(default_factory=list)


@dataclass
class Served:
    hub: ClientHub
    stream: NumberedStream[Ticked]
    dispatcher: Dispatcher
    connect: Callable[[], Any]


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    hub = ClientHub()
    stream = NumberedStream(TICKS_EVENT, hub)
    dispatcher = Dispatcher()

    async def subscribe(_: NoParams, peer: RpcPeer) -> Snapshot:
        return Snapshot(seq=stream.subscribe(peer))

    async def unsubscribe(_: NoParams, peer: RpcPeer) -> Snapshot:
        stream.unsubscribe(peer)
        return Snapshot(seq=stream.seq)

    dispatcher.add(TICKS_SUBSCRIBE, subscribe)
    dispatcher.add(TICKS_UNSUBSCRIBE, unsubscribe)
    tasks: list[asyncio.Task[None]] = []
    peers: list[RpcPeer] = []

    async def connect() -> Client:
        left, right = socket.socketpair()
        server_reader, server_writer = await asyncio.open_connection(sock=left)
        client_reader, client_writer = await asyncio.open_connection(sock=right)
        server = RpcPeer(server_reader, server_writer, name="broker", on_request=dispatcher)
        pushes: list[tuple[str, Any]] = []
        peer = RpcPeer(
            client_reader,
            client_writer,
            name="client",
            on_notification=lambda method, params, _: pushes.append((method, params)),
        )
        client = Client(peer, pushes)
        hub.add(server)
        peers.extend((server, client.peer))
        tasks.extend(asyncio.create_task(peer.run()) for peer in (server, client.peer))
        return client

    yield Served(hub, stream, dispatcher, connect)
    for peer in peers:
        peer.close()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _pushes(client: Client, count: int) -> list[tuple[str, Any]]:
    async with asyncio.timeout(5):
        while len(client.pushes) < count:
            await asyncio.sleep(0.01)
    return client.pushes


async def test_a_subscription_by_the_former_name_gets_pushes_by_the_former_name(
    served: Served,
) -> None:
    current, former = await served.connect(), await served.connect()
    assert await current.peer.call("ticks:subscribe") == {"seq": 0}
    assert await former.peer.call("tick/subscribe") == {"seq": 0}

    served.stream.publish(lambda seq: Ticked(seq=seq))

    assert await _pushes(current, 1) == [("ticks:event", {"seq": 1})]
    assert await _pushes(former, 1) == [("tick/event", {"seq": 1})]


async def test_subscribing_again_by_the_current_name_switches_to_current_pushes(
    served: Served,
) -> None:
    client = await served.connect()
    await client.peer.call("tick/subscribe")
    await client.peer.call("ticks:subscribe")
    served.stream.publish(lambda seq: Ticked(seq=seq))
    assert await _pushes(client, 1) == [("ticks:event", {"seq": 1})]


async def test_unsubscribing_forgets_the_former_name_too(served: Served) -> None:
    client = await served.connect()
    await client.peer.call("tick/subscribe")
    await client.peer.call("ticks:unsubscribe")
    await client.peer.call("ticks:subscribe")
    served.stream.publish(lambda seq: Ticked(seq=seq))
    assert await _pushes(client, 1) == [("ticks:event", {"seq": 1})]


async def test_a_name_never_routed_is_still_not_found(served: Served) -> None:
    client = await served.connect()
    with pytest.raises(errors.MethodNotFound):
        await client.peer.call("tick/unsubscribe")


def test_the_method_list_names_current_names_only(served: Served) -> None:
    assert served.dispatcher.methods() == ["ticks:subscribe", "ticks:unsubscribe"]


def test_a_former_name_taken_by_another_method_is_refused() -> None:
    dispatcher = Dispatcher()

    async def handler(_: NoParams, __: RpcPeer) -> Snapshot:
        return Snapshot(seq=0)

    dispatcher.add(Method("tick/subscribe", NoParams, Snapshot, "old one"), handler)
    with pytest.raises(ValueError, match="tick/subscribe"):
        dispatcher.add(TICKS_SUBSCRIBE, handler)
    assert dispatcher.methods() == ["tick/subscribe"]


def _declared() -> list[Method[Any, Any] | Push[Any]]:
    found: list[Method[Any, Any] | Push[Any]] = []
    for module in (methods, worker_methods):
        found += [v for v in vars(module).values() if isinstance(v, Method | Push)]
    return found


def test_every_name_on_the_wire_uses_one_separator_and_formers_collide_with_nothing() -> None:
    declared = _declared()
    names = [item.name for item in declared]
    assert names, "no methods found"
    # ``noun:verb``, or one word for the broker's own (ping, version, status, shutdown).
    assert [name for name in names if "/" in name or name.count(":") > 1] == []
    formers = [item.former for item in declared if item.former is not None]
    assert len(set(names) | set(formers)) == len(names) + len(formers)
