"""Fakes the replicas component tests share: a scripted planner, recorded engine calls, a member
as discovery lists it, and the component built over them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from backend.components.replicas.component import Planner, ReplicasComponent
from backend.components.replicas.plan import Action, ModelView, Policy, Replica
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.engines import EngineActionParams, EngineModels, ReplicaMark
from backend.protocol.types.jobs import JobEvent
from backend.protocol.types.nodes import DiscoveredNode, NodeEngineModels, NodeTelemetry
from tests.fakes import FakeClock

ME = "node-me"
MEMBER = "node-gpu"
DIGEST = "sha256:" + "ab" * 32
GIB = 1 << 30


@dataclass
class Settings:
    """A settings view with the ``replicas_*`` fields (the rest the component does not read)."""

    replicas_mode: str = "on"
    replicas_target_wait_s: float = 5.0
    replicas_ttl_s: float = 120.0
    replicas_max_per_model: int = 2


@dataclass
class ScriptedPlanner:
    """Returns ``answer`` each round and keeps what it was given."""

    answer: tuple[Action, ...] = ()
    calls: list[tuple[tuple[ModelView, ...], tuple[Replica, ...], Policy, float]] = field(
        default_factory=list
    )

    def __call__(
        self, models: tuple[ModelView, ...], held: tuple[Replica, ...], policy: Policy, now: float
    ) -> tuple[Action, ...]:
        self.calls.append((models, held, policy, now))
        return self.answer


@dataclass
class Engines:
    """This node's engines (``models``) and the actions asked of them and of members."""

    models: EngineModels
    local: list[EngineActionParams] = field(default_factory=list)
    forwarded: list[EngineActionParams] = field(default_factory=list)
    fail_with: Exception | None = None
    gate: asyncio.Event | None = None  # set: a member's load waits for it

    async def read_models(self) -> EngineModels:
        return self.models

    async def local_action(self, params: EngineActionParams) -> object:
        self.local.append(params)
        return self._answer()

    async def member_action(self, params: EngineActionParams) -> object:
        self.forwarded.append(params)
        if self.gate is not None:
            await self.gate.wait()
        return self._answer()

    def _answer(self) -> object:
        if self.fail_with is not None:
            raise self.fail_with
        return {"ok": True}


def own_models(marks: dict[str, ReplicaMark] | None = None) -> EngineModels:
    """This node: Ollama with ``qwen2.5:7b`` loaded (and any replica ``marks``)."""
    ollama = EngineName("ollama")
    return EngineModels(
        models=["qwen2.5:7b"],
        by_engine={ollama: ["qwen2.5:7b"]},
        loaded_by_engine={ollama: ["qwen2.5:7b"]},
        slots_by_engine={},
        digests_by_engine={ollama: {"qwen2.5:7b": DIGEST}},
        replicas_by_engine={ollama: marks} if marks else {},
    )


def member(pending: int = 0, loaded: Sequence[str] = ()) -> DiscoveredNode:
    """The GPU box: llama.cpp with the same weights on disk under its file name, 20 GiB free."""
    return DiscoveredNode(
        node_id=NodeId(MEMBER),
        name="gpu-box",
        kind="pair",
        sources=["mdns"],
        addresses=["192.0.2.7"],
        ports={},
        engines={
            "llamacpp": NodeEngineModels(
                models=["qwen2.5-7b-instruct-q4_k_m.gguf"],
                loaded=list(loaded),
                digests={"qwen2.5-7b-instruct-q4_k_m.gguf": DIGEST},
                sizes={"qwen2.5-7b-instruct-q4_k_m.gguf": 5 * GIB},
            )
        },
        reachable=True,
        telemetry=NodeTelemetry(
            valid=True,
            memory_total_bytes=32 * GIB,
            memory_used_bytes=12 * GIB,
            pending_jobs=pending,
        ),
    )


@dataclass
class Rig:
    """The component and its fakes."""

    component: ReplicasComponent
    clock: FakeClock
    settings: Settings
    planner: ScriptedPlanner
    engines: Engines
    members: list[str]
    nodes: list[DiscoveredNode]
    jobs: list[JobEvent]


def build(
    *,
    mode: str = "on",
    members: Sequence[str] = (ME, MEMBER),
    models: EngineModels | None = None,
    record_jobs: Callable[[Sequence[JobEvent]], None] | None = None,
    planner: Planner | None = None,
    models_read_nowait: bool = False,
) -> Rig:
    """A component over fakes (the planner scripted, nothing until told, unless given)."""
    clock = FakeClock(1_000_000.0)
    settings = Settings(replicas_mode=mode)
    scripted = ScriptedPlanner()
    engines = Engines(models or own_models())
    listed = list(members)
    nodes = [member()]
    jobs: list[JobEvent] = []
    component = ReplicasComponent(
        node_id=ME,
        node_name=lambda: "laptop",
        clock=clock,
        settings=lambda: settings,
        members=lambda: listed,
        nodes=lambda: nodes,
        engine_models=(lambda: engines.models) if models_read_nowait else engines.read_models,
        local_action=engines.local_action,
        member_action=engines.member_action,
        record_jobs=record_jobs or jobs.extend,
        planner=planner or scripted,
    )
    return Rig(component, clock, settings, scripted, engines, listed, nodes, jobs)
