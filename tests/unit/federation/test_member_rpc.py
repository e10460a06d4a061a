"""The member link's serving side (``MemberRpc`` on the node API, real mutual TLS on loopback):
only a trusted member may open it; a member may call only ``MEMBER_METHODS`` and only for this
node (``node`` naming another one is refused, naming this one is removed before the handler);
answers and errors come back unchanged; a member no longer trusted loses its open link."""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from backend.common import tls
from backend.components.cluster import peer_client
from backend.components.identity.certificate import mint
from backend.protocol import contract, errors, jsonrpc, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.engines import EngineRef, EngineStatus, NodeScope
from tests.support.handshake import handshake_status
from tests.unit.cluster.harness import A_ID, B_ID, C_ID, free_port
from tests.unit.federation.member_server import (
    MemberServer,
    member_context,
    member_server,
    open_link,
    until,
)
from tests.unit.federation.test_link import status

LLAMACPP = EngineName("llamacpp")


class EngineHandlers:
    """Scripted ``engine:list`` / ``engine:status`` / ``engine:set-port`` on B's dispatcher."""

    def __init__(self, server: MemberServer) -> None:
        self.lists: list[NodeScope] = []
        self.statuses: list[EngineRef] = []
        server.dispatcher.add(methods.ENGINE_LIST, self.engine_list)
        server.dispatcher.add(methods.ENGINE_STATUS, self.engine_status)
        server.dispatcher.add(methods.ENGINE_SET_PORT, self.set_port)
        server.dispatcher.add(methods.SHUTDOWN, self.shutdown)
        self.shutdowns = 0

    async def engine_list(self, params: NodeScope, peer: RpcPeer) -> list[EngineStatus]:
        self.lists.append(params)
        return [status("ollama"), status("llamacpp", port=11501)]

    async def engine_status(self, params: EngineRef, peer: RpcPeer) -> EngineStatus:
        self.statuses.append(params)
        return status(params.engine)

    async def set_port(self, params: Any, peer: RpcPeer) -> EngineStatus:
        raise errors.Conflict(f"port {params.port} is already in use")

    async def shutdown(self, params: Any, peer: RpcPeer) -> Any:
        self.shutdowns += 1
        raise AssertionError("a member must never reach shutdown")


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[MemberServer]:
    async with member_server(tmp_path) as server:
        yield server


async def link_status(server: MemberServer, context: ssl.SSLContext) -> int | str:
    """The HTTP status a link attempt got, or the kind of error that refused it."""
    return await handshake_status(f"wss://127.0.0.1:{server.port}/v1/cluster/link", context)


async def test_a_client_without_a_certificate_gets_403(server: MemberServer) -> None:
    context = peer_client.pinned_anonymous_context(server.b.credentials.cert_der)
    assert await link_status(server, context) == 403
    assert server.dispatcher.calls == []


async def test_a_certificate_that_is_not_pinned_is_refused(server: MemberServer) -> None:
    stranger = mint(C_ID)
    refused = await link_status(server, tls.client_context(stranger, server.b.credentials.cert_der))
    # TLS 1.3 refuses the unknown certificate after the client's side of the handshake, so
    # the client sees the server hang up rather than an HTTP answer.
    assert isinstance(refused, str), f"a stranger's certificate got HTTP {refused}"
    assert len(server.hub) == 0
    assert server.dispatcher.calls == []


async def test_a_member_opens_a_link_and_joins_the_clients(server: MemberServer) -> None:
    assert await link_status(server, member_context(server.a.credentials, server.b)) == 101
    async with open_link(server, member_context(server.a.credentials, server.b)) as link:
        await until(lambda: len(server.hub) == 1)
        assert not link.peer.closed
    await until(lambda: len(server.hub) == 0)


async def test_a_member_calls_an_allowed_method_and_gets_the_answer(server: MemberServer) -> None:
    handlers = EngineHandlers(server)
    async with open_link(server, member_context(server.a.credentials, server.b)) as link:
        answer = await contract.call(link.peer, methods.ENGINE_LIST, NodeScope())
    assert answer == [status("ollama"), status("llamacpp", port=11501)]
    assert handlers.lists == [NodeScope()]


async def test_a_method_outside_member_methods_is_not_found(server: MemberServer) -> None:
    handlers = EngineHandlers(server)
    assert methods.SHUTDOWN.name not in methods.MEMBER_METHODS
    async with open_link(server, member_context(server.a.credentials, server.b)) as link:
        with pytest.raises(errors.MethodNotFound) as refused:
            await link.peer.call(methods.SHUTDOWN.name)
        assert refused.value.code == jsonrpc.METHOD_NOT_FOUND == -32601
        with pytest.raises(errors.MethodNotFound):
            await link.peer.call(methods.CLUSTER_REMOVE.name, {"node_id": str(A_ID)})
    assert handlers.shutdowns == 0
    assert [method for method, _ in server.dispatcher.calls] == [], "refused before dispatch"


async def test_params_naming_another_node_are_refused_before_the_handler(
    server: MemberServer,
) -> None:
    handlers = EngineHandlers(server)
    other = NodeId(str(C_ID))
    async with open_link(server, member_context(server.a.credentials, server.b)) as link:
        with pytest.raises(errors.InvalidParams) as refused:
            await link.peer.call(methods.ENGINE_LIST.name, {"node": other})
        assert refused.value.code == -32602
        assert other in refused.value.message
        with pytest.raises(errors.InvalidParams):
            await link.peer.call(methods.ENGINE_STATUS.name, {"engine": "ollama", "node": A_ID})
        with pytest.raises(errors.InvalidParams):  # errors:clear names its node ``node_id``
            await link.peer.call(methods.ERRORS_CLEAR.name, {"id": "x", "node_id": other})
    assert handlers.lists == [] and handlers.statuses == []
    assert server.dispatcher.calls == []


async def test_params_naming_this_node_reach_the_handler_without_it(server: MemberServer) -> None:
    handlers = EngineHandlers(server)
    async with open_link(server, member_context(server.a.credentials, server.b)) as link:
        answer = await link.peer.call(
            methods.ENGINE_STATUS.name, {"engine": "llamacpp", "node": str(B_ID)}
        )
        await link.peer.call(methods.ENGINE_LIST.name, {"node": str(B_ID)})
    assert methods.ENGINE_STATUS.decode_result(answer) == status("llamacpp")
    assert handlers.statuses == [EngineRef(engine=LLAMACPP)]
    assert handlers.lists == [NodeScope()]
    assert server.dispatcher.calls == [
        (methods.ENGINE_STATUS.name, {"engine": "llamacpp"}),
        (methods.ENGINE_LIST.name, {}),
    ]


async def test_a_handler_error_reaches_the_member_unchanged(server: MemberServer) -> None:
    EngineHandlers(server)
    async with open_link(server, member_context(server.a.credentials, server.b)) as link:
        with pytest.raises(errors.Conflict) as refused:
            await link.peer.call(
                methods.ENGINE_SET_PORT.name, {"engine": "ollama", "port": 5, "node": str(B_ID)}
            )
    assert refused.value.code == jsonrpc.CONFLICT
    assert refused.value.message == "port 5 is already in use"


async def test_malformed_params_are_answered_with_invalid_params(server: MemberServer) -> None:
    handlers = EngineHandlers(server)
    async with open_link(server, member_context(server.a.credentials, server.b)) as link:
        with pytest.raises(errors.InvalidParams, match="engine"):
            await link.peer.call(methods.ENGINE_STATUS.name, {"node": str(B_ID)})
    assert handlers.statuses == []


async def test_a_member_no_longer_trusted_loses_its_open_link(server: MemberServer) -> None:
    EngineHandlers(server)
    async with open_link(server, member_context(server.a.credentials, server.b)) as link:
        listed = await contract.call(link.peer, methods.ENGINE_LIST, NodeScope())
        assert len(listed) == 2
        await until(lambda: len(server.hub) == 1)
        await server.b.service.roster.remove(A_ID)
        await until(lambda: link.peer.closed)
        await until(lambda: len(server.hub) == 0)
        with pytest.raises(errors.ConnectionLost):
            await link.peer.call(methods.ENGINE_LIST.name)
    again = await link_status(server, member_context(server.a.credentials, server.b))
    assert again != 101, "a removed member opened a new link"


async def test_the_route_refuses_a_non_member_even_without_the_members_only_middleware(
    server: MemberServer,
) -> None:
    """``MemberRpc`` checks the client itself, in case its route is served without
    ``build_app``'s middleware."""
    app = web.Application()
    server.rpc.add_routes(app)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    port = free_port()
    try:
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=server.b.pinned.context).start()
        bare = dataclasses.replace(server, port=port)
        anonymous = peer_client.pinned_anonymous_context(server.b.credentials.cert_der)
        assert await link_status(bare, anonymous) == 403
        assert await link_status(bare, member_context(server.a.credentials, server.b)) == 101
    finally:
        await runner.cleanup()
