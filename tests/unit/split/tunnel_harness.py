"""Two paired nodes and an RPC tunnel between them, in process over real mutual TLS on loopback.

B (the member that runs ``rpc-server``) serves ``RpcTunnels`` on a node API app (``build_app``,
the members-only gate included) with its ``PinnedServer``; an echo server stands in for its
``rpc-server``. A (the host that runs ``llama-server``) holds a ``TunnelListener`` to B.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from backend.components.cluster.members import Member
from backend.components.split.lender import RpcServerUnavailable
from backend.components.split.tunnel_listener import MemberDialer, TunnelListener
from backend.components.split.tunnel_server import RpcTunnels
from tests.fakes import FakeClock
from tests.unit.cluster.harness import A_ID, B_ID, Node, pair, serve_routes, start_node, stop_node


class EchoServer:
    """Stands in for ``rpc-server`` on loopback: answers every byte with itself."""

    def __init__(self) -> None:
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._echo, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            await self._server.wait_closed()

    async def _echo(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            self._writers.discard(writer)
            writer.close()


@dataclass
class ScriptedRpcServer:
    """Stands in for ``RpcServerLender``: names a port, or refuses with ``unavailable``; counts
    the tunnels holding it."""

    port: int
    unavailable: str | None = None
    holds: int = 0
    starts: int = 0

    async def ensure(self) -> int:
        if self.unavailable is not None:
            raise RpcServerUnavailable(self.unavailable)
        self.starts += 1
        return self.port

    def hold(self) -> None:
        self.holds += 1

    def release(self) -> None:
        self.holds -= 1


@dataclass
class Tunnels:
    """A paired with B; B serves tunnels on ``port``; A's ``listener`` carries to B."""

    a: Node
    b: Node
    port: int
    tunnels: RpcTunnels
    echo: EchoServer
    listener: TunnelListener
    dialer: MemberDialer
    rpc_server: ScriptedRpcServer = field(default_factory=lambda: ScriptedRpcServer(0))

    def b_as_seen_by_a(self) -> Member:
        """B's entry in A's membership (what the host dials)."""
        return self.a.service.membership.members[B_ID]


@contextlib.asynccontextmanager
async def tunnels(root: Path) -> AsyncIterator[Tunnels]:
    """A and B paired; B's tunnel route leads to an echo server; A listens for llama-server."""
    clock = FakeClock(start=1_700_000_000.0)
    a = await start_node(root, "desk", clock, A_ID)
    b = await start_node(root, "laptop", clock, B_ID)
    echo = EchoServer()
    runner: web.AppRunner | None = None
    listener: TunnelListener | None = None
    dialer: MemberDialer | None = None
    try:
        await pair(a, b)
        rpc_server = ScriptedRpcServer(await echo.start())
        served = RpcTunnels(cluster=b.service, rpc_server=rpc_server)
        runner, port = await serve_routes(b, served.add_routes)
        dialer = MemberDialer(a.credentials, lambda member: [("127.0.0.1", port)])
        listener = TunnelListener(a.service.membership.members[B_ID], dialer)
        await listener.start()
        yield Tunnels(a, b, port, served, echo, listener, dialer, rpc_server)
    finally:
        if listener is not None:
            await listener.close()
        if dialer is not None:
            await dialer.close()
        if runner is not None:
            await runner.cleanup()
        await echo.close()
        await stop_node(b)
        await stop_node(a)


async def connect(listener: TunnelListener) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """What llama-server does: a plain TCP connection to the listener's loopback port."""
    return await asyncio.open_connection("127.0.0.1", listener.port)


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Whether the connection ends (EOF or reset) within ``seconds``, reading whatever comes."""
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(65536):
                pass
    except ConnectionError:
        return True
    except TimeoutError:
        return False
    return True
