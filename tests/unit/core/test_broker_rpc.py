"""The broker's own methods through the real dispatcher: status, components, readiness."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from backend.core import broker_rpc
from backend.core.broker_rpc import Readiness, StatusSource, Uptime
from backend.core.component import Component
from backend.core.rpc import ClientHub, Dispatcher, NumberedStream
from backend.core.supervisor import Supervisor
from backend.protocol import errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import ComponentsEvent, Ports
from tests.fakes import FakeClock, RecordingErrors

PORTS = Ports(node=1, ollama=2, openai=3, llamacpp=4)


class Idle(Component):
    async def run(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        return None


class Notified:
    """Stands in for a client connection: records what it is told."""

    def __init__(self) -> None:
        self.notes: list[tuple[str, Any]] = []

    def notify(self, method: str, params: Any = None) -> None:
        self.notes.append((method, params))


def _routed() -> tuple[Dispatcher, list[str]]:
    clock = FakeClock(start=100.0)
    supervisor = Supervisor(errors=RecordingErrors(), clock=clock)
    supervisor.add(Idle("control"))
    stream: NumberedStream[ComponentsEvent] = NumberedStream(methods.COMPONENTS_EVENT, ClientHub())
    status = StatusSource(
        started_at=90.0,
        data_dir=Path("/data"),
        node_id=NodeId("node-a"),
        control_address="/data/pair.sock",
        log_file=None,
        uptime_ms=Uptime(clock, since=99.5),
        node_name=lambda: "gpu-box",
        ports=lambda: PORTS,
        front_doors=lambda: {"ollama": "http://127.0.0.1:2"},
        components=supervisor.snapshot,
        errors=list,
    )
    dispatcher = Dispatcher()
    asked: list[str] = []
    broker_rpc.register(dispatcher, status=status, request_shutdown=lambda: asked.append("stop"))
    broker_rpc.register_components(dispatcher, supervisor, stream)
    return dispatcher, asked


async def test_status_ping_and_shutdown_answer_from_the_sources() -> None:
    dispatcher, asked = _routed()
    peer = cast(RpcPeer, Notified())
    status = await dispatcher("status", None, peer)
    assert (status.node_name, status.uptime_ms, status.ports) == ("gpu-box", 500, PORTS)
    assert status.front_doors == {"ollama": "http://127.0.0.1:2"}
    assert [c.name for c in status.components] == ["control"]
    assert (await dispatcher("ping", None, peer)).uptime_ms == 500
    await dispatcher("shutdown", None, peer)
    assert asked == ["stop"]


async def test_restarting_an_unknown_component_is_not_found() -> None:
    dispatcher, _ = _routed()
    with pytest.raises(errors.NotFound, match="nope"):
        await dispatcher("components:restart", {"name": "nope"}, cast(RpcPeer, Notified()))


def test_app_ready_goes_to_clients_that_connect_once_the_broker_is_ready() -> None:
    readiness = Readiness(ClientHub(), node_name=lambda: "laptop")
    early, late = Notified(), Notified()
    readiness.greet(cast(RpcPeer, early))
    readiness.mark_ready()
    readiness.greet(cast(RpcPeer, late))
    assert early.notes == []
    assert [(method, params.node_name) for method, params in late.notes] == [
        ("app:ready", "laptop")
    ]
