"""The RPC tunnel's host side: a loopback port that ``llama-server --rpc`` dials, each of whose
connections is carried to one member's ``rpc-server`` over the member's pinned mutual TLS.

``llama-server`` never learns the member's address: it sees ``127.0.0.1:<port>``, and the bytes
it sends there leave this computer only inside TLS to the certificate that member was paired
with. A member that cannot be reached gets the local connection closed at once, so
``llama-server`` fails fast instead of waiting on a silent socket.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence

import aiohttp

from backend.common import tls
from backend.common.certificates import NodeCredentials
from backend.components.cluster.members import Member
from backend.components.federation.dial import LinkFailed, Socket, dial
from backend.components.split import tunnel
from backend.core.lan_tcp import LAN_CONNECT_TIMEOUT_S, lan_socket

log = logging.getLogger(__name__)

Dial = Callable[[Member], Awaitable[Socket]]
Addresses = Callable[[Member], Sequence[tuple[str, int]]]


class MemberDialer:
    """Opens tunnels to members over mutual TLS pinned to each member's certificate, at all of
    its addresses at once; owns the HTTP session (and so the connections) they run on."""

    def __init__(self, credentials: NodeCredentials, addresses: Addresses) -> None:
        self._credentials = credentials
        self._addresses = addresses
        self._session: aiohttp.ClientSession | None = None
        # Building a context loads our key (a file round trip): once per member certificate.
        self._contexts: dict[bytes, ssl.SSLContext] = {}

    async def __call__(self, member: Member) -> Socket:
        """A tunnel to ``member``'s rpc-server; ``LinkFailed`` says why there is none."""
        if self._session is None or self._session.closed:
            # The context is per member and per dial; the connector's is never used.
            connector = aiohttp.TCPConnector(force_close=True, socket_factory=lan_socket)
            self._session = aiohttp.ClientSession(connector=connector)
        context = self._contexts.get(member.cert_der)
        if context is None:
            context = tls.client_context(self._credentials, member.cert_der)
            self._contexts[member.cert_der] = context
        return await dial(
            self._session,
            context,
            self._addresses(member),
            timeout=LAN_CONNECT_TIMEOUT_S,
            path=tunnel.TUNNEL_PATH,
        )

    async def close(self) -> None:
        """Close every tunnel this dialer opened (idempotent)."""
        if self._session is not None:
            await self._session.close()


class TunnelListener:
    """Owns a listening socket on 127.0.0.1 and the connections accepted on it; each one is
    piped through its own tunnel (opened by ``dial``) to ``member``."""

    def __init__(self, member: Member, dial: Dial) -> None:
        self._member = member
        self._dial = dial
        self._server: asyncio.Server | None = None
        self._port = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._carrying: set[asyncio.Task[object]] = set()

    @property
    def port(self) -> int:
        """The loopback port ``llama-server --rpc 127.0.0.1:<port>`` dials."""
        if self._server is None:
            raise RuntimeError("the tunnel listener is not started")
        return self._port

    async def start(self, port: int = 0) -> int:
        """Listen on 127.0.0.1 (``port`` 0: a free one); returns the port."""
        self._server = await asyncio.start_server(
            self._accepted, "127.0.0.1", port, limit=tunnel.CHUNK_BYTES
        )
        self._port = int(self._server.sockets[0].getsockname()[1])
        return self._port

    async def close(self) -> None:
        """Stop listening and drop every connection carried (idempotent)."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()
        if self._carrying:  # asyncio's own tasks for the connections: waited for, bounded
            await asyncio.wait(self._carrying, timeout=2 * tunnel.CLOSE_LIMIT_S)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tunnel.no_delay(writer)
        self._writers.add(writer)
        carrying = asyncio.current_task()
        if carrying is not None:
            self._carrying.add(carrying)
        name = f"rpc-tunnel:{self._member.name}"
        try:
            try:
                frames = await self._dial(self._member)
            except LinkFailed as exc:
                # An abort, not a close: llama-server sees a reset and fails at once.
                log.warning("%s not opened: %s", name, exc)
                writer.transport.abort()
                return
            await tunnel.pipe(reader, writer, frames, name=name)
        finally:
            self._writers.discard(writer)
            self._carrying.discard(carrying)
