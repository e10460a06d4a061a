"""The RPC tunnel's member side: ``GET /v1/cluster/rpc-tunnel`` on the node API, served only to a
trusted member, piping its frames to this computer's ``rpc-server`` on loopback.

``rpc-server`` listens on 127.0.0.1 only; this route is the one way another computer reaches it,
and only with a pinned certificate (the members-only gate answers anyone else 403, and so does
the route itself). Every tunnel of a member is cut the moment it stops being trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

import msgspec
from aiohttp import web

from backend.components.cluster import routes as cluster_routes
from backend.components.cluster.members import Member, Membership
from backend.components.cluster.service import ClusterService
from backend.components.split import tunnel
from backend.components.split.lender import RpcServerUnavailable
from backend.core.lan_tcp import keep_alive
from backend.protocol.types.base import NodeId

log = logging.getLogger(__name__)

# rpc-server answers a loopback connect at once, or it is not there.
LOCAL_CONNECT_TIMEOUT_S = 2.0


class RpcServerSource(Protocol):
    """This computer's ``rpc-server``, started on demand (``RpcServerLender``)."""

    async def ensure(self) -> int:
        """Its loopback port, started if need be; ``RpcServerUnavailable`` says why not."""
        ...

    def hold(self) -> None:
        """A tunnel is using it: it is not stopped for idleness until released."""
        ...

    def release(self) -> None:
        """A tunnel ended."""
        ...


class _Tunnel(msgspec.Struct, frozen=True):
    """One open tunnel: its member, and the two transports that cutting it aborts."""

    node_id: NodeId
    member_side: asyncio.BaseTransport
    rpc_side: asyncio.BaseTransport

    def cut(self) -> None:
        """Drop both connections now (no polite close: the member is no longer trusted)."""
        self.member_side.abort()  # type: ignore[attr-defined]
        self.rpc_side.abort()  # type: ignore[attr-defined]


class RpcTunnels:
    """Serves members' RPC tunnels; owns their connections to the local ``rpc-server``.

    ``rpc_server`` starts this computer's ``rpc-server`` when a tunnel asks for it and is held
    for as long as each tunnel lasts; when it cannot run, a tunnel is refused with 503 and a
    logged reason.
    """

    def __init__(self, *, cluster: ClusterService, rpc_server: RpcServerSource) -> None:
        self._cluster = cluster
        self._rpc_server = rpc_server
        self._open: set[_Tunnel] = set()
        cluster.on_trust_changed(self._trust_changed)

    def __len__(self) -> int:
        return len(self._open)

    def add_routes(self, app: web.Application) -> None:
        """Route ``GET /v1/cluster/rpc-tunnel``; open tunnels are cut when the node API stops."""
        app.router.add_get(tunnel.TUNNEL_PATH, self._serve)
        app.on_shutdown.append(self._cut_all)

    async def _cut_all(self, _: web.Application) -> None:
        for open_tunnel in list(self._open):
            open_tunnel.cut()

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        member = cluster_routes.member_or_forbidden(self._cluster, request)
        self._rpc_server.hold()
        try:
            return await self._serve_member(request, member)
        finally:
            self._rpc_server.release()

    async def _serve_member(self, request: web.Request, member: Member) -> web.StreamResponse:
        connected = await self._connect_rpc_server(member.name)
        if isinstance(connected, web.Response):
            return connected
        reader, writer = connected
        frames = web.WebSocketResponse(
            max_msg_size=tunnel.MAX_FRAME_BYTES, compress=False, timeout=tunnel.CLOSE_LIMIT_S
        )
        try:
            await frames.prepare(request)
        except BaseException:  # the member hung up during the upgrade, or we are stopping
            writer.close()
            raise
        member_side = request.transport
        if member_side is None:  # it hung up right after
            writer.close()
            return frames
        _lan_keep_alive(member_side)
        opened = _Tunnel(member.node_id, member_side, writer.transport)
        self._open.add(opened)
        log.info("rpc tunnel from %s (%s) open", member.name, member.node_id)
        try:
            await tunnel.pipe(reader, writer, frames, name=f"rpc-tunnel:{member.name}")
        finally:
            self._open.discard(opened)
            log.info("rpc tunnel from %s (%s) closed", member.name, member.node_id)
        return frames

    async def _connect_rpc_server(
        self, member: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | web.Response:
        """A connection to the local rpc-server, or the 503 that tells the member why not."""
        try:
            port = await self._rpc_server.ensure()
        except RpcServerUnavailable as exc:
            return _refused(member, str(exc))
        try:
            async with asyncio.timeout(LOCAL_CONNECT_TIMEOUT_S):
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, limit=tunnel.CHUNK_BYTES
                )
        except (OSError, TimeoutError) as exc:
            why = getattr(exc, "strerror", None) or "no answer"
            return _refused(member, f"rpc-server on 127.0.0.1:{port} cannot be reached ({why})")
        tunnel.no_delay(writer)
        return reader, writer

    def _trust_changed(self, membership: Membership) -> None:
        trusted = {member.node_id for member in membership.trusted()}
        for open_tunnel in list(self._open):
            if open_tunnel.node_id not in trusted:
                log.info(
                    "member %s is no longer trusted: its rpc tunnel is cut", open_tunnel.node_id
                )
                open_tunnel.cut()
                self._open.discard(open_tunnel)


def _refused(member: str, why: str) -> web.Response:
    log.warning("rpc tunnel from %s refused: %s", member, why)
    return web.json_response({"error": why}, status=503, reason="No rpc-server")


def _lan_keep_alive(transport: asyncio.BaseTransport) -> None:
    """A host that vanished without a FIN frees its rpc-server connection within seconds."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            keep_alive(sock)
