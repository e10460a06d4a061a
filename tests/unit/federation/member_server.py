"""A member-RPC server for the federation tests: node B's real ``MemberRpc`` route on a node API
app (``build_app``) served over TLS with B's ``PinnedServer``, trusting A after a real pairing
(the in-process cluster harness), and what A needs to open a link to it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from backend.common import tls
from backend.common.certificates import NodeCredentials
from backend.components.federation import websocket
from backend.components.federation.server import LINK_PATH, MemberRpc
from backend.core.rpc import ClientHub, Dispatcher
from backend.protocol.peer import RpcPeer
from tests.fakes import FakeClock
from tests.unit.cluster.harness import (
    A_ID,
    B_ID,
    Node,
    pair,
    serve_routes,
    start_node,
    stop_node,
)


class RecordingDispatcher(Dispatcher):
    """A real ``Dispatcher`` that also keeps the raw (method, params) of every call it gets."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []

    async def __call__(self, method: str, params: Any, peer: RpcPeer) -> Any:
        self.calls.append((method, params))
        return await super().__call__(method, params, peer)


@dataclass
class MemberServer:
    """Node B serving ``/v1/cluster/link`` on ``port``; node A is paired with it."""

    a: Node
    b: Node
    port: int
    dispatcher: RecordingDispatcher
    hub: ClientHub
    rpc: MemberRpc
    runner: web.AppRunner
    peers: list[RpcPeer] = field(default_factory=list)

    def addresses(self) -> list[tuple[str, int]]:
        """Where B's member RPC listens (a link's ``addresses``)."""
        return [("127.0.0.1", self.port)]


@contextlib.asynccontextmanager
async def member_server(root: Path) -> AsyncIterator[MemberServer]:
    """Nodes A and B paired (each trusts the other); B serves member RPC on its own port."""
    clock = FakeClock(start=1_700_000_000.0)
    a = await start_node(root, "desk", clock, A_ID)
    b = await start_node(root, "laptop", clock, B_ID)
    runner: web.AppRunner | None = None
    try:
        await pair(a, b)
        assert a.trusts(b) and b.trusts(a)
        dispatcher = RecordingDispatcher()
        hub = ClientHub()
        rpc = MemberRpc(node_id=b.node_id, dispatcher=dispatcher, hub=hub, cluster=b.service)
        runner, port = await serve_routes(b, rpc.add_routes)
        yield MemberServer(a, b, port, dispatcher, hub, rpc, runner)
    finally:
        if runner is not None:
            await runner.cleanup()
        await stop_node(b)
        await stop_node(a)


@dataclass
class Link:
    """A raw member link as a client: the RPC peer over the WebSocket, and what runs it."""

    peer: RpcPeer
    serving: asyncio.Task[None]
    pushes: list[tuple[str, Any]]


@contextlib.asynccontextmanager
async def open_link(
    server: MemberServer,
    context: Any,
    on_push: Callable[[str, Any], None] | None = None,
) -> AsyncIterator[Link]:
    """Open ``/v1/cluster/link`` on ``server`` with the TLS ``context``; closed on exit."""
    pushes: list[tuple[str, Any]] = []

    def notified(method: str, params: Any, peer: RpcPeer) -> None:
        pushes.append((method, params))
        if on_push is not None:
            on_push(method, params)

    connector = aiohttp.TCPConnector(ssl=context, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        socket = await session.ws_connect(
            f"wss://127.0.0.1:{server.port}{LINK_PATH}",
            ssl=context,
            timeout=aiohttp.ClientWSTimeout(ws_close=2.0),
        )
        peer, reader = websocket.peer_over(socket, name="test-link", on_notification=notified)
        serving = asyncio.create_task(websocket.serve(socket, peer, reader))
        # Let the peer start: an ``RpcPeer`` closed before its ``run()`` began would run on.
        await asyncio.sleep(0)
        try:
            yield Link(peer, serving, pushes)
        finally:
            peer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(serving, timeout=3.0)


def member_context(client: NodeCredentials, server: Node) -> Any:
    """Mutual TLS as ``client``, trusting only ``server``'s certificate."""
    return tls.client_context(client, server.credentials.cert_der)


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait (real time, briefly) until ``condition()`` holds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


async def until_async(condition: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    """``until`` for an async condition."""
    async with asyncio.timeout(timeout):
        while not await condition():
            await asyncio.sleep(0.01)
