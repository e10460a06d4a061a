"""Calls aimed at another node: ``Dispatcher.forward`` offers them to a forwarder first (its
answer is returned; ``NOT_FORWARDED`` falls back to the local handler), and
``FederationComponent.forward`` sends them over the member's link without ``node``, refuses a
node that is no member, and keeps this node's own notes (errors:clear of the unreachable
error) local. A member that leaves takes its engines and errors with it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from backend.components.federation.component import FederationComponent, MemberEnginesBoard
from backend.components.federation.link import UNREACHABLE_ID, MemberLink
from backend.core.rpc import NOT_FORWARDED, ClientHub, Dispatcher, NumberedStream
from backend.protocol import errors, methods
from backend.protocol.contract import Method
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import ErrorClear
from backend.protocol.types.engines import (
    EngineEvent,
    EngineRef,
    EngineSetPort,
    EngineStatus,
    MemberEnginesChanged,
    MemberEnginesLeft,
    NodeScope,
)
from tests.unit.cluster.harness import A_ID, B_ID, C_ID
from tests.unit.federation.member_server import MemberServer, member_server, until
from tests.unit.federation.test_link import (
    LLAMACPP,
    OLLAMA,
    ScriptedMember,
    Sinks,
    error,
    quick_clock,
    status,
)

PEER = cast(RpcPeer, object())  # the handlers here never use the peer


# Dispatcher.forward ---------------------------------------------------------------------------


class Forwarder:
    """Answers calls for node ``far`` as that node would; declines everything else."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def __call__(self, method: Method[Any, Any], params: Any) -> Any:
        self.calls.append((method.name, params))
        if getattr(params, "node", None) == "far":
            return [status("ollama", port=11999)]
        return NOT_FORWARDED


def dispatcher_with_local_engine_list() -> tuple[Dispatcher, list[NodeScope]]:
    local: list[NodeScope] = []

    async def engine_list(params: NodeScope, peer: RpcPeer) -> list[EngineStatus]:
        local.append(params)
        return [status("llamacpp")]

    dispatcher = Dispatcher()
    dispatcher.add(methods.ENGINE_LIST, engine_list)
    return dispatcher, local


async def test_a_call_naming_another_node_is_answered_by_the_forwarder() -> None:
    dispatcher, local = dispatcher_with_local_engine_list()
    forwarder = Forwarder()
    dispatcher.forward([methods.ENGINE_LIST], forwarder)
    answer = await dispatcher(methods.ENGINE_LIST.name, {"node": "far"}, PEER)
    assert answer == [status("ollama", port=11999)]
    assert forwarder.calls == [(methods.ENGINE_LIST.name, NodeScope(node=NodeId("far")))]
    assert local == [], "the local handler is not called for a forwarded call"


async def test_not_forwarded_falls_back_to_the_local_handler() -> None:
    dispatcher, local = dispatcher_with_local_engine_list()
    forwarder = Forwarder()
    dispatcher.forward([methods.ENGINE_LIST], forwarder)
    assert await dispatcher(methods.ENGINE_LIST.name, None, PEER) == [status("llamacpp")]
    assert await dispatcher(methods.ENGINE_LIST.name, {"node": "near"}, PEER) == [
        status("llamacpp")
    ]
    assert local == [NodeScope(), NodeScope(node=NodeId("near"))]
    assert [params for _, params in forwarder.calls] == local


async def test_only_the_forwarded_methods_go_to_the_forwarder() -> None:
    dispatcher, local = dispatcher_with_local_engine_list()
    forwarder = Forwarder()
    dispatcher.forward([methods.ENGINE_STATUS], forwarder)
    assert await dispatcher(methods.ENGINE_LIST.name, {"node": "far"}, PEER) == [status("llamacpp")]
    assert forwarder.calls == []
    assert local == [NodeScope(node=NodeId("far"))]


async def test_malformed_params_are_refused_before_the_forwarder() -> None:
    dispatcher, local = dispatcher_with_local_engine_list()
    forwarder = Forwarder()
    dispatcher.forward([methods.ENGINE_LIST], forwarder)
    with pytest.raises(errors.InvalidParams, match="engine:list"):
        await dispatcher(methods.ENGINE_LIST.name, {"node": 7}, PEER)
    with pytest.raises(errors.MethodNotFound):
        await dispatcher("engine:nonsense", {"node": "far"}, PEER)
    assert forwarder.calls == [] and local == []


# FederationComponent ---------------------------------------------------------------------------


class EngineEvents:
    """Stands in for a client subscribed to this node's ``engine`` stream."""

    def __init__(self) -> None:
        self.events: list[EngineEvent] = []

    def notify(self, method: str, params: Any = None) -> None:
        assert method == methods.ENGINE_EVENT.name
        self.events.append(params)


class Federation:
    """A's federation component, linked to B's member-RPC server."""

    def __init__(self, server: MemberServer) -> None:
        self.server = server
        self.sinks = Sinks()
        self.board = MemberEnginesBoard(NumberedStream(methods.ENGINE_EVENT, ClientHub()))
        self.subscriber = EngineEvents()
        self.board.events.subscribe(cast(RpcPeer, self.subscriber))
        self.component = FederationComponent(
            node_id=server.a.node_id,
            credentials=server.a.credentials,
            membership=lambda: server.a.service.membership,
            addresses=lambda member: server.addresses() if member.node_id == B_ID else [],
            sinks=self.sinks.link_sinks(also=self.board.changed),  # as wiring does
            board=self.board,
            clock=quick_clock(),
        )
        server.a.service.on_trust_changed(self.component.trust_changed)

    def reachable(self) -> bool:
        state = self.board.get(B_ID)
        return state is not None and state.reachable


@contextlib.asynccontextmanager
async def running(federation: Federation) -> AsyncIterator[Federation]:
    ready = asyncio.Event()
    federation.component.bind_ready(ready.set)
    task = asyncio.create_task(federation.component.run())
    try:
        await asyncio.wait_for(ready.wait(), 5)
        yield federation
    finally:
        await federation.component.stop()
        await asyncio.wait_for(task, 5)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[MemberServer]:
    async with member_server(tmp_path) as server:
        yield server


@pytest.fixture
async def federation(server: MemberServer) -> AsyncIterator[Federation]:
    member = ScriptedMember(server)
    member.errors = [error("engine:ollama", B_ID)]
    async with running(Federation(server)) as federation:
        await until(lambda: federation.reachable() and bool(federation.sinks.errors))
        yield federation


async def test_a_node_that_is_not_a_member_is_not_found(federation: Federation) -> None:
    with pytest.raises(errors.NotFound, match=str(C_ID)):
        await federation.component.forward(
            methods.ENGINE_STATUS, EngineRef(engine=OLLAMA, node=C_ID)
        )
    with pytest.raises(errors.NotFound):
        await federation.component.forward(methods.ENGINE_LIST, NodeScope(node=C_ID))
    called = [method for method, _ in federation.server.dispatcher.calls]
    assert methods.ENGINE_STATUS.name not in called and methods.ENGINE_LIST.name not in called


async def test_calls_for_this_node_or_no_node_stay_here(federation: Federation) -> None:
    forward = federation.component.forward
    assert await forward(methods.ENGINE_LIST, NodeScope()) is NOT_FORWARDED
    assert await forward(methods.ENGINE_LIST, NodeScope(node=A_ID)) is NOT_FORWARDED
    assert await forward(methods.ERRORS_CLEAR, ErrorClear(id="x")) is NOT_FORWARDED
    assert await forward(methods.ERRORS_CLEAR, ErrorClear(id="x", node_id=A_ID)) is NOT_FORWARDED


async def test_clearing_the_unreachable_note_about_a_member_stays_here(
    federation: Federation,
) -> None:
    forward = federation.component.forward
    note = ErrorClear(id=UNREACHABLE_ID, node_id=B_ID)
    assert await forward(methods.ERRORS_CLEAR, note) is NOT_FORWARDED
    gone = ErrorClear(id="engine:ollama", node_id=C_ID)  # a node no longer linked
    assert await forward(methods.ERRORS_CLEAR, gone) is NOT_FORWARDED
    assert all(
        method != methods.ERRORS_CLEAR.name for method, _ in federation.server.dispatcher.calls
    )


async def test_a_forwarded_call_goes_to_the_member_without_node(
    federation: Federation, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed: list[tuple[str, Any]] = []
    real_call = MemberLink.call

    async def recording_call(link: MemberLink, method: Method[Any, Any], params: Any) -> Any:
        handed.append((method.name, params))
        return await real_call(link, method, params)

    monkeypatch.setattr(MemberLink, "call", recording_call)
    forward = federation.component.forward
    answer = await forward(methods.ENGINE_STATUS, EngineRef(engine=LLAMACPP, node=B_ID))
    assert answer == status("llamacpp", port=11600)
    assert await forward(methods.ERRORS_CLEAR, ErrorClear(id="engine:x", node_id=B_ID)) is None
    assert handed == [
        (methods.ENGINE_STATUS.name, EngineRef(engine=LLAMACPP)),
        (methods.ERRORS_CLEAR.name, ErrorClear(id="engine:x")),
    ]
    assert federation.server.dispatcher.calls[-2:] == [
        (methods.ENGINE_STATUS.name, {"engine": "llamacpp"}),
        (methods.ERRORS_CLEAR.name, {"id": "engine:x"}),
    ]


async def test_a_member_error_reaches_the_caller_unchanged(federation: Federation) -> None:
    with pytest.raises(errors.Conflict, match=r"^port 5 is already in use$"):
        await federation.component.forward(
            methods.ENGINE_SET_PORT, EngineSetPort(engine=OLLAMA, port=5, node=B_ID)
        )


async def test_the_members_engines_are_on_the_board_and_leave_with_it(
    federation: Federation,
) -> None:
    state = federation.board.get(B_ID)
    assert state is not None and state.engines == [status("ollama")]
    changed = [e for e in federation.subscriber.events if isinstance(e, MemberEnginesChanged)]
    assert changed[0].member.reachable is False, "shown (unreachable) before the link is up"
    assert changed[-1].member.reachable is True
    assert federation.sinks.errors == [(B_ID, [error("engine:ollama", B_ID)])]
    await federation.server.a.service.roster.remove(B_ID)
    await until(lambda: federation.board.get(B_ID) is None)
    await asyncio.sleep(0.2)  # the link's task winds down meanwhile
    assert federation.board.members() == []
    assert isinstance(federation.subscriber.events[-1], MemberEnginesLeft)
    assert federation.sinks.errors[-1] == (B_ID, []), "its errors left with it"
    with pytest.raises(errors.NotFound):
        await federation.component.forward(methods.ENGINE_LIST, NodeScope(node=B_ID))
