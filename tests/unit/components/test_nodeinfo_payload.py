"""The sampler's validity and age, and the node-info payload built from it (no sockets)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import msgspec

from backend.components.engines.actions import ModelListing
from backend.components.engines.component import EnginesComponent
from backend.components.engines.manifest import SlotsSpec
from backend.components.nodeinfo.payload import NodeInfoSource, last_engine_models
from backend.components.nodeinfo.telemetry import (
    STALE_AFTER_S,
    Collector,
    Sample,
    TelemetryComponent,
    TelemetryView,
)
from backend.core.rpc import ClientHub, NumberedStream
from backend.protocol import methods
from backend.protocol.types.broker import Ports
from backend.protocol.types.nodes import NodeCpu, NodeEngineModels, NodeGpu, NodeMemory, NodeOs
from tests.fakes import FakeClock

PORTS = Ports(node=1, ollama=2, openai=3, llamacpp=4)


class _FakeCollector(Collector):
    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.taken: list[float] = []
        self.closed = 0

    def sample(self, taken_at: float) -> Sample:
        if self.fail:
            raise RuntimeError("sensor on fire")
        self.taken.append(taken_at)
        return Sample(
            NodeCpu(cores=8, utilization_percent=12.5),
            NodeMemory(total_bytes=16, used_bytes=4),
            [NodeGpu(vendor="nvidia", name="GPU")],
            taken_at,
        )

    def close(self) -> None:
        self.closed += 1


async def _run_until_ready(
    component: TelemetryComponent,
) -> asyncio.Task[None]:
    ready = asyncio.Event()
    component.bind_ready(ready.set)
    task = asyncio.get_running_loop().create_task(component.run())
    async with asyncio.timeout(5):
        await ready.wait()
    return task


async def test_view_is_invalid_before_the_first_sample_then_valid_then_stale() -> None:
    clock = FakeClock()
    collector = _FakeCollector()
    component = TelemetryComponent(clock=clock, make_collector=lambda: collector)
    assert component.view() == TelemetryView()
    task = await _run_until_ready(component)
    await component.stop()
    await asyncio.wait([task], timeout=5)
    assert task.cancelled() and collector.closed == 1
    view = component.view()
    assert view.valid and view.cpu.utilization_percent == 12.5
    assert view.age_ms == int((clock.now - collector.taken[-1]) * 1000)
    clock.now = collector.taken[-1] + STALE_AFTER_S + 0.5
    stale = component.view()
    assert not stale.valid and stale.age_ms == int((STALE_AFTER_S + 0.5) * 1000)
    assert stale.memory.total_bytes == 16, "the last readings stay visible, marked stale"


async def test_samples_come_every_interval() -> None:
    clock = FakeClock()
    collector = _FakeCollector()
    component = TelemetryComponent(clock=clock, make_collector=lambda: collector, interval=2.0)
    task = await _run_until_ready(component)
    async with asyncio.timeout(5):
        while len(collector.taken) < 4:
            await asyncio.sleep(0.01)
    await component.stop()
    await asyncio.wait([task], timeout=5)
    gaps = {b - a for a, b in zip(collector.taken, collector.taken[1:], strict=False)}
    assert gaps == {2.0}


async def test_a_failing_sampler_is_ready_but_reports_invalid_telemetry() -> None:
    collector = _FakeCollector(fail=True)
    component = TelemetryComponent(clock=FakeClock(), make_collector=lambda: collector)
    task = await _run_until_ready(component)
    await component.stop()
    await component.stop()
    await asyncio.wait([task], timeout=5)
    view = component.view()
    assert (view.valid, view.age_ms, view.gpus) == (False, None, [])


def _source(view: TelemetryView, **extra: Any) -> NodeInfoSource:
    return NodeInfoSource(
        node_id="11111111-2222-3333-4444-555555555555",
        version="9.9",
        ports=lambda: PORTS,
        name=lambda: "desk",
        telemetry=lambda: view,
        os=NodeOs(system="Linux", machine="x86_64"),
        **extra,
    )


def test_payload_without_readings_omits_them_and_never_says_zero() -> None:
    payload = json.loads(msgspec.json.encode(_source(TelemetryView()).describe()))
    assert payload == {
        "node_id": "11111111-2222-3333-4444-555555555555",
        "name": "desk",
        "version": "9.9",
        "os": {"system": "Linux", "machine": "x86_64"},
        "cpu": {},
        "memory": {},
        "gpus": [],
        "telemetry_valid": False,
        "ports": {"node": 1, "ollama": 2, "openai": 3, "llamacpp": 4, "relay": 14321},
        "engines": {},
    }


def test_payload_with_readings_and_engines() -> None:
    view = TelemetryView(
        cpu=NodeCpu(name="CPU", cores=4),
        memory=NodeMemory(total_bytes=8, used_bytes=2),
        valid=True,
        age_ms=150,
    )
    models = {"ollama": NodeEngineModels(models=["a", "b"], loaded=["a"])}
    payload = json.loads(
        msgspec.json.encode(
            _source(view, engine_models=lambda: models, pending_jobs=lambda: 3).describe()
        )
    )
    assert payload["pending_jobs"] == 3  # peers rank this node by it
    assert payload["cpu"] == {"name": "CPU", "cores": 4}
    assert (payload["telemetry_valid"], payload["telemetry_age_ms"]) == (True, 150)
    assert payload["engines"] == {"ollama": {"models": ["a", "b"], "loaded": ["a"]}}
    assert "cluster_id" not in payload


_ENV_SLOTS = SlotsSpec(source="env", default=1)


@dataclass(frozen=True)
class _Manifest:
    slots: SlotsSpec = _ENV_SLOTS


@dataclass(frozen=True)
class _Status:
    slots: int | None


@dataclass
class _Controller:
    running: bool
    relaunching: bool = False
    slots: int | None = None
    manifest: Any = _Manifest()
    store: Any = None  # an engine without a model store

    def status(self) -> Any:
        return _Status(self.slots)


def test_engine_models_are_the_running_engines_last_good_lists() -> None:
    engines = EnginesComponent(
        data_dir=Path("/nonexistent"),
        ledger=cast(Any, None),
        errors_sink=cast(Any, None),
        clock=cast(Any, None),
        events=NumberedStream(methods.ENGINE_EVENT, ClientHub()),
    )
    engines.controllers = cast(
        Any,
        {
            "ollama": _Controller(running=True, slots=4),
            "lmstudio": _Controller(running=False),
            "llamacpp": _Controller(running=True),
        },
    )
    engines._listed = {"ollama": ModelListing(["a", "b"]), "lmstudio": ModelListing(["stale"])}
    engines._loaded = {"ollama": ["b"], "lmstudio": ["stale"]}
    models = last_engine_models(engines)
    assert models == {
        # The slot counts are the routing table's: the engine's own, else its manifest's.
        "ollama": NodeEngineModels(models=["a", "b"], loaded=["b"], slots=4),
        "llamacpp": NodeEngineModels(slots=1),  # running, not listed yet: models omitted
    }
    assert last_engine_models(None) == {}
