"""A broker stand-in for the CLI's unit tests: ``status`` and ``cluster:status`` from a small
cluster, other answers from a script, every call recorded; with an engine stream that pushes
scripted events while a call runs."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest

from backend.cli import client_commands
from backend.protocol import errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.broker import BrokerStatus, Ports
from backend.protocol.types.cluster import ClusterMember, ClusterStatus
from backend.protocol.types.engines import (
    EngineEvent,
    EngineModels,
    EnginesSnapshot,
    InstallProgress,
    MemberEngines,
    MemberEnginesChanged,
    PullProgress,
)

ALICE = NodeId("0f3c2a9e-1111-4222-8333-944455556666")  # this node
BOB = NodeId("7b1d00c4-aaaa-4bbb-8ccc-9ddddeeeefff")
CAROL = NodeId("7b1d99f0-2222-4333-8444-955566667777")  # shares "7b1d" with bob


def broker_status(node_id: NodeId = ALICE, name: str = "alice") -> BrokerStatus:
    """``status`` of this node."""
    return BrokerStatus(
        version="0.1.0",
        pid=1,
        started_at=0.0,
        uptime_ms=1000,
        data_dir="/d",
        node_id=node_id,
        node_name=name,
        control_address="/s",
        log_file=None,
        ports=Ports(node=14320, ollama=11434, openai=1234, llamacpp=8080),
        components=[],
        errors=[],
    )


def member(node_id: NodeId, name: str) -> ClusterMember:
    """A cluster member as ``cluster:status`` lists it."""
    return ClusterMember(
        node_id=node_id,
        name=name,
        fingerprint="sha256:00",
        address="192.168.1.20",
        node_port=14320,
        added_by=ALICE,
        added_at=0.0,
        state="online",
    )


def cluster_status(*members: ClusterMember) -> ClusterStatus:
    """``cluster:status`` of this node with ``members``."""
    return ClusterStatus(
        node_id=ALICE,
        fingerprint="sha256:00",
        key_protection="file",
        cluster_id="c1" if members else None,
        members=list(members),
    )


class ScriptedBroker:
    """Answers ``status`` and ``cluster:status`` for alice, bob and carol (unless told
    otherwise), and any other method as ``answer`` says; records ``(method, params)``."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {
            methods.STATUS.name: broker_status(),
            methods.CLUSTER_STATUS.name: cluster_status(member(BOB, "bob"), member(CAROL, "carol")),
        }
        self.calls: list[tuple[str, Any]] = []
        self.closed = asyncio.Event()

    def answer(self, method: str, value: Any) -> None:
        """Answer ``method`` with ``value`` (an exception is raised)."""
        self.answers[method] = value

    @property
    def methods_called(self) -> list[str]:
        return [method for method, _ in self.calls]

    async def call(self, method: str, params: Any = None, *, timeout: float | None = 10) -> Any:
        self.calls.append((method, params))
        if method not in self.answers:
            raise errors.MethodNotFound(f"not scripted: {method}")
        value = self.answers[method]
        if isinstance(value, BaseException):
            raise value
        return msgspec.to_builtins(value)

    async def wait_closed(self) -> None:
        await self.closed.wait()

    @property
    def peer(self) -> RpcPeer:
        return cast(RpcPeer, self)


NO_MODELS = EngineModels(models=[], by_engine={}, loaded_by_engine={}, slots_by_engine={})


class StreamingBroker(ScriptedBroker):
    """A scripted broker with an engine stream: ``engine:subscribe`` is answered, and when a
    call of a method in ``pushes`` arrives, its events go to the CLI's push hook first. Counts
    the connections the CLI opened and records every call's timeout."""

    def __init__(self) -> None:
        super().__init__()
        self.pushes: dict[str, list[EngineEvent]] = {}
        self.listener: Callable[[str, Any], None] | None = None
        self.connections = 0
        self.timeouts: dict[str, float | None] = {}
        snapshot = EnginesSnapshot(seq=0, engines=[], models=NO_MODELS)
        self.answer(methods.ENGINE_SUBSCRIBE.name, snapshot)

    async def call(self, method: str, params: Any = None, *, timeout: float | None = 10) -> Any:
        self.timeouts[method] = timeout
        for event in self.pushes.get(method, []):
            if self.listener is not None:
                self.listener(methods.ENGINE_EVENT.name, msgspec.to_builtins(event))
        return await super().call(method, params, timeout=timeout)

    def attach(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Make every ``pair`` command connect to this broker instead of a real one."""

        async def connected(
            data_dir: Path, work: Callable[[RpcPeer], Awaitable[int]], on_push: Any = None
        ) -> int:
            self.connections += 1
            self.listener = on_push
            return await work(self.peer)

        monkeypatch.setattr(client_commands, "_with_broker", connected)


OLLAMA = EngineName("ollama")
MODEL = "phi3:mini"


def pull(percent: float | None, stage: str = "pulling", **fields: Any) -> PullProgress:
    """Progress of a pull of ``MODEL`` into Ollama."""
    values: dict[str, Any] = {"engine": OLLAMA, "model": MODEL, "stage": stage, "percent": percent}
    return PullProgress(**(values | fields))


def install(percent: float | None, stage: str = "downloading", **fields: Any) -> InstallProgress:
    """Progress of an install (or update) of Ollama."""
    values: dict[str, Any] = {"engine": OLLAMA, "stage": stage, "percent": percent}
    return InstallProgress(**(values | fields))


def changed(
    seq: int,
    node_id: NodeId,
    pulls: Sequence[PullProgress] = (),
    installs: Sequence[InstallProgress] = (),
) -> MemberEnginesChanged:
    """A member's engine state as its link tells it, with ``pulls`` and ``installs`` running."""
    member = MemberEngines(
        node_id=node_id,
        name="bob",
        reachable=True,
        models=NO_MODELS,
        pulls=list(pulls),
        installs=list(installs),
    )
    return MemberEnginesChanged(seq=seq, member=member)


def drawn(out: io.StringIO) -> list[str]:
    """The lines a progress bar drew on ``out``, one per redraw."""
    return [line.rstrip() for line in out.getvalue().split("\r") if line]


REMOTE_PULL = [pull(None, "pulling manifest"), pull(12.5), pull(100.0, done=True)]
INSTALL = [
    install(None, "checking for a new version"),
    install(40.0),
    install(None, "unpacking"),
    install(100.0, "updated", done=True),
]
