"""An adopted engine follows whatever answers on its port now: another llama-server started
there with other flags brings its slot count and model, another Ollama its model list. The
engines answer from in-process aiohttp servers; the controllers run over fake drivers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from backend.components.engines.component import EnginesComponent
from backend.components.nodeinfo.payload import last_engine_models
from backend.components.proxy.component import local_engines
from backend.protocol.types.engines import EngineStateChanged
from tests.unit.components.engine_fakes import (
    ControllerRig,
    FakeWorld,
    RecordedEvents,
    bundled_manifest,
    engines_over,
    rig,
    write_gguf,
)


@dataclass
class FakeEngine:
    """A llama-server's ``/props`` and ``/v1/models`` and an Ollama's ``/api/tags``, changed
    by the test as if another engine had taken the port."""

    slots: int = 64
    model: str = "big"
    tags: list[str] = field(default_factory=lambda: ["m"])
    broken: bool = False  # every answer a 500

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{path:.*}", self.answer)
        return app

    async def answer(self, request: web.Request) -> web.StreamResponse:
        if self.broken:
            return web.json_response({"error": "busy"}, status=500)
        if request.path == "/props":
            return web.json_response({"total_slots": self.slots})
        if request.path == "/v1/models":
            return web.json_response({"data": [{"id": self.model}]})
        if request.path == "/api/tags":
            return web.json_response({"models": [{"name": n, "size": 1} for n in self.tags]})
        if request.path == "/api/ps":
            return web.json_response({"models": []})
        return web.json_response({})


@dataclass
class Adopted:
    engines: EnginesComponent
    rig: ControllerRig
    engine: FakeEngine
    events: RecordedEvents


@pytest.fixture
async def adopted(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Adopted]:
    """The engine of the test's parameter, adopted on a port where a fake engine answers."""
    name: str = request.param
    engine = FakeEngine()
    async with aiohttp.ClientSession() as session, TestServer(engine.app()) as server:
        world = FakeWorld()
        world.answering.add(server.port)
        manifest = bundled_manifest(name, {"runtime": {"port": server.port}})
        made = rig(manifest, session, tmp_path, world=world)
        engines, events = engines_over(tmp_path, {name: made})
        await made.controller.detect()
        await made.controller.start()
        assert made.controller.status().adopted
        yield Adopted(engines, made, engine, events)
        await made.controller.shutdown()


@pytest.mark.parametrize("adopted", ["llamacpp"], indirect=True)
async def test_another_llama_server_on_the_port_brings_its_slot_count(adopted: Adopted) -> None:
    controller, engines = adopted.rig.controller, adopted.engines
    assert controller.status().slots == 64
    first = await engines.models()
    assert first.slots_by_engine["llamacpp"] == {"big": 64}
    adopted.engine.slots = 4  # `llama-server -np 4` now answers on the same port
    await engines._check_models(force=False)
    assert controller.status().slots == 4
    assert adopted.rig.pushed[-1].slots == 4, "subscribers hear of the new count"
    assert adopted.events.models()[-1].models.slots_by_engine["llamacpp"] == {"big": 4}
    assert local_engines(engines)["llamacpp"].slots == 4, "and so does the router"
    adopted.engine.model = "small"  # and then one serving another model
    await engines._check_models(force=False)
    assert adopted.events.models()[-1].models.slots_by_engine["llamacpp"] == {"small": 4}
    assert local_engines(engines)["llamacpp"].resident == ["small"]


@pytest.mark.parametrize("adopted", ["llamacpp"], indirect=True)
async def test_an_unchanged_or_unreadable_count_publishes_nothing(adopted: Adopted) -> None:
    engines = adopted.engines
    await engines.models()
    pushed = len(adopted.rig.pushed)
    await engines._check_models(force=False)
    adopted.engine.broken = True
    await engines._check_models(force=False)
    assert adopted.rig.controller.status().slots == 64, "a failed read keeps the last count"
    assert len(adopted.rig.pushed) == pushed
    assert not any(isinstance(e, EngineStateChanged) for e in adopted.events.events)
    assert adopted.events.models() == []


@pytest.mark.parametrize("adopted", ["ollama"], indirect=True)
async def test_another_ollama_on_the_port_brings_its_model_list(adopted: Adopted) -> None:
    engines = adopted.engines
    assert (await engines.models()).by_engine["ollama"] == ["m"]
    await engines._check_models(force=False)
    assert adopted.events.models() == [], "nothing changed"
    adopted.engine.tags = ["m", "n"]  # nothing loaded either way: only the list tells
    await engines._check_models(force=False)
    assert adopted.events.models()[-1].models.by_engine["ollama"] == ["m", "n"]
    assert local_engines(engines)["ollama"].models == ["m", "n"]


@pytest.mark.parametrize("adopted", ["llamacpp"], indirect=True)
async def test_an_adopted_llama_server_is_routed_the_model_it_serves_not_the_store(
    adopted: Adopted,
) -> None:
    engines = adopted.engines
    store = adopted.rig.controller.store
    assert store is not None
    store.root.mkdir(parents=True)
    write_gguf(store.root / "alpha.gguf")  # PAIR's store, which the user's server never loads
    models = await engines.models()
    assert models.by_engine["llamacpp"] == ["alpha"], "the store is still shown as the store"
    assert local_engines(engines)["llamacpp"].models == ["big"], "what the engine serves"
    assert last_engine_models(engines)["llamacpp"].models == ["big"], "and so peers see it"
    adopted.engine.model = "small"
    await engines._check_models(force=False)
    assert local_engines(engines)["llamacpp"].models == ["small"]
