"""LM Studio's ``parallel`` belongs to each loaded model: the proxy's scheduler gets it per
model, follows loads and unloads, and never keeps the count of an engine that stopped.

The engine is the LM Studio emulator (in process, on a free port), adopted by a controller
over fake drivers; models are loaded as ``lms load KEY --parallel N`` would."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from backend.components.engines.component import EnginesComponent
from backend.components.engines.manifest import (
    SlotsSpec,
    build,
    bundled_documents,
    deep_merge,
)
from backend.components.engines.slots import RoutingSlots, routing_slots
from backend.components.proxy.component import local_engines
from backend.components.proxy.table import LocalEngine, build_table
from backend.devtools.emulators.lmstudio import build_lmstudio_app
from backend.devtools.emulators.lmstudio_state import LmStudioConfig
from backend.workers.proxy.routing.local import shape_of
from backend.workers.proxy.scheduler.engine_scheduler import EngineScheduler, SlotSample, Ticket
from tests.fakes import FakeClock, RecordingErrors
from tests.unit.components.engine_fakes import (
    ControllerRig,
    FakeWorld,
    bundled_manifest,
    manual_clock,
    rig,
)
from tests.unit.proxy.scheduler_fakes import settle

SMALL, BIG = "qwen2.5-7b-instruct", "llama-3.2-3b-instruct"


class Events:
    def publish(self, make_event: Any) -> None:
        make_event(0)


@dataclass
class Adopted:
    engines: EnginesComponent
    rig: ControllerRig
    http: aiohttp.ClientSession
    url: str

    async def lms_load(self, model: str, parallel: int) -> None:
        body = {"model": model, "parallel": parallel, "identifier": model}
        async with self.http.post(f"{self.url}/_emulator/lms/load", json=body) as answer:
            assert answer.status == 200, await answer.text()

    async def lms_unload(self, model: str) -> None:
        body = {"identifier": model}
        async with self.http.post(f"{self.url}/_emulator/lms/unload", json=body) as answer:
            assert answer.status == 200, await answer.text()


def _engines(data_dir: Path) -> EnginesComponent:
    """An engines component around the controllers a test sets, nothing else running."""
    return EnginesComponent(
        data_dir=data_dir,
        ledger=cast(Any, None),
        errors_sink=RecordingErrors(),
        clock=manual_clock(),
        events=cast(Any, Events()),
    )


@pytest.fixture
async def lmstudio(tmp_path: Path) -> AsyncIterator[Adopted]:
    """LM Studio (the emulator) with two downloaded models, adopted by PAIR."""
    app = build_lmstudio_app(LmStudioConfig(models=(SMALL, BIG)))
    async with aiohttp.ClientSession() as session, TestServer(app) as server:
        world = FakeWorld()
        world.answering.add(server.port)
        manifest = bundled_manifest("lmstudio", {"runtime": {"port": server.port}})
        made = rig(manifest, session, tmp_path, world=world)
        engines = _engines(tmp_path)
        engines.controllers = {"lmstudio": made.controller}
        await made.controller.detect()
        await made.controller.start()
        assert made.controller.status().adopted
        yield Adopted(engines, made, session, f"http://127.0.0.1:{server.port}")
        await made.controller.shutdown()


def test_loaded_instances_count_per_model_and_a_model_loaded_on_demand_gets_the_default() -> None:
    spec = SlotsSpec(source="loaded_instances", default=4)
    assert routing_slots(spec, 10, {SMALL: 2, BIG: 8}) == RoutingSlots(4, {SMALL: 2, BIG: 8})
    assert routing_slots(spec, None, {SMALL: 0}) == RoutingSlots(4, {})


def test_engine_wide_sources_give_every_model_the_engine_count_or_the_default() -> None:
    spec = SlotsSpec(source="env", env="OLLAMA_NUM_PARALLEL", default=1)
    assert routing_slots(spec, 3, {"m": 3}) == RoutingSlots(3, {})
    assert routing_slots(spec, None, {}) == RoutingSlots(1, {}), "stopped: no count"


def test_the_table_carries_the_per_model_counts_of_the_local_engine() -> None:
    local = {"lmstudio": LocalEngine("http://127.0.0.1:1", [SMALL, BIG], 4, {SMALL: 2})}
    table = build_table(node_id="n", local=local, nodes=[], loads={}, generation=1)
    (target,) = table.engines["lmstudio"]
    assert (target.slots, target.model_slots) == (4, {SMALL: 2})
    assert shape_of(target).model_slots == {SMALL: 2}


async def test_the_proxy_gets_each_models_parallel_and_follows_loads_and_unloads(
    lmstudio: Adopted,
) -> None:
    await lmstudio.lms_load(SMALL, 2)
    await lmstudio.lms_load(BIG, 8)
    await lmstudio.engines.models()
    engine = local_engines(lmstudio.engines)["lmstudio"]
    assert dict(engine.model_slots) == {SMALL: 2, BIG: 8}
    assert engine.slots == 4, "a model loaded on demand: LM Studio's default, not the sum"

    await lmstudio.lms_unload(BIG)
    await lmstudio.engines._check_models(force=False)  # the watcher's tick
    assert dict(local_engines(lmstudio.engines)["lmstudio"].model_slots) == {SMALL: 2}

    await lmstudio.lms_load(BIG, 3)
    await lmstudio.engines._check_models(force=False)
    assert dict(local_engines(lmstudio.engines)["lmstudio"].model_slots) == {SMALL: 2, BIG: 3}


async def test_an_engine_that_stopped_leaves_no_slot_count_behind(lmstudio: Adopted) -> None:
    await lmstudio.lms_load(SMALL, 2)
    await lmstudio.engines.models()
    assert lmstudio.engines.last_slots() == {"lmstudio": {SMALL: 2}}
    lmstudio.rig.world.answering.clear()  # `lms server stop` outside PAIR: the port closes
    for _ in range(5):
        await lmstudio.rig.clock.advance(1.0)
    assert lmstudio.rig.controller.status().state == "stopped"
    assert lmstudio.rig.controller.status().slots is None
    assert lmstudio.engines.last_slots() == {}
    assert "lmstudio" not in local_engines(lmstudio.engines)


class Idle:
    """An engine whose slots the scheduler cannot read: only the ceiling decides."""

    async def free_slots(self) -> SlotSample | None:
        return None


async def test_the_scheduler_runs_each_model_up_to_its_own_count() -> None:
    local = {"lmstudio": LocalEngine("http://127.0.0.1:1", [SMALL, BIG], 4, {SMALL: 1, BIG: 3})}
    table = build_table(node_id="n", local=local, nodes=[], loads={}, generation=1)
    scheduler = EngineScheduler("lmstudio", cast(Any, Idle()), clock=FakeClock())
    scheduler.configure(shape_of(table.engines["lmstudio"][0]))
    admitted: list[str] = []

    async def request(model: str) -> Ticket:
        ticket = await scheduler.admit(model)
        admitted.append(model)
        return ticket

    tasks = [asyncio.create_task(request(m)) for m in [SMALL] * 2 + [BIG] * 4 + ["other"] * 5]
    await settle()
    counts = {m: admitted.count(m) for m in (SMALL, BIG, "other")}
    assert counts == {SMALL: 1, BIG: 3, "other": 4}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await scheduler.aclose()


async def test_a_crashed_engine_leaves_no_slot_count_behind(tmp_path: Path) -> None:
    override = {
        "detect": [{"path": sys.executable}],  # an executable file to detect
        # Its port is never dialled (the fake world answers for it), but keep off Ollama's.
        "runtime": {"health": None, "env": {"OLLAMA_NUM_PARALLEL": "3"}, "port": 1},
    }
    manifest = build(deep_merge(bundled_documents()["ollama"], override), "test")
    async with aiohttp.ClientSession() as session:
        made = rig(manifest, session, tmp_path)
        engines = _engines(tmp_path)
        engines.controllers = {"ollama": made.controller}
        await made.controller.detect()
        await made.controller.start()
        assert local_engines(engines)["ollama"].slots == 3
        made.world.spawned[0].exit(-9)
        for _ in range(20):
            await asyncio.sleep(0)
        assert made.controller.status().state == "error"
        assert made.controller.status().slots is None
        assert engines.last_slots() == {}
        assert "ollama" not in local_engines(engines), "the router has no count of it"
        for process in made.world.spawned:
            process.finish_output()
        await made.controller.shutdown()
