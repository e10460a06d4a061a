"""``engine:action`` with replica marks, on the engines component over rigged controllers: a
replica load is marked once it succeeded, the user's load, an unload and a delete clear it, a
model the user had loaded stays unmarked, and unloading llama.cpp's replica switches back to
the model it replaced. Ollama's answers come from an in-process aiohttp server."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from backend.components.engines.component import EnginesComponent
from backend.components.engines.replica_actions import local_action, run_marked_action
from backend.protocol import errors
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.engines import EngineActionName, EngineActionParams
from tests.unit.components.engine_fakes import (
    T0,
    ControllerRig,
    FakeWorld,
    bundled_manifest,
    engines_over,
    rig,
    write_gguf,
)

BY = NodeId("node-a")


@dataclass
class FakeOllama:
    """Ollama's list and load answers; ``loaded`` is what ``/api/ps`` lists."""

    loaded: list[str] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self.answer)
        return app

    async def answer(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/api/tags":
            return web.json_response({"models": [{"name": "m", "size": 7}]})
        if request.path == "/api/ps":
            return web.json_response({"models": [{"name": name} for name in self.loaded]})
        body = json.loads(await request.text() or "{}")
        if request.path == "/api/generate" and body.get("keep_alive") == 0:
            self.loaded = [name for name in self.loaded if name != body["model"]]
        elif request.path == "/api/generate":
            self.loaded = sorted({*self.loaded, body["model"]})
        return web.json_response({})


@dataclass
class Rigged:
    engines: EnginesComponent
    llama: ControllerRig
    ollama: FakeOllama


@pytest.fixture
async def rigged(tmp_path: Path) -> AsyncIterator[Rigged]:
    store = tmp_path / "models" / "llamacpp"
    store.mkdir(parents=True)
    write_gguf(store / "alpha.gguf")
    write_gguf(store / "beta.gguf")
    override = {"detect": [{"path": sys.executable}], "runtime": {"health": None}}
    (tmp_path / "engines").mkdir()
    (tmp_path / "engines" / "llamacpp.json").write_text(json.dumps(override))
    fake = FakeOllama()
    async with aiohttp.ClientSession() as session, TestServer(fake.app()) as server:
        world = FakeWorld()
        assert server.port is not None
        world.answering.add(server.port)
        llama = rig(bundled_manifest("llamacpp"), session, tmp_path, world=world)
        ollama_manifest = bundled_manifest("ollama", {"runtime": {"port": server.port}})
        ollama = rig(ollama_manifest, session, tmp_path, world=world)
        engines, _ = engines_over(tmp_path, {"llamacpp": llama, "ollama": ollama})
        for controller in engines.controllers.values():
            await controller.detect()
        yield Rigged(engines, llama, fake)
        for process in world.spawned:
            process.finish_output()
        for controller in engines.controllers.values():
            await controller.shutdown()


async def _act(
    rigged: Rigged,
    engine: str,
    action: EngineActionName,
    model: str,
    *,
    replica: bool = False,
) -> None:
    params = EngineActionParams(
        engine=EngineName(engine),
        action=action,
        model=model,
        replica=replica,
        reason="m waited 18 s on gpu-box" if replica else None,
    )
    assert (await run_marked_action(rigged.engines, params, by=BY)).ok


def _marked(rigged: Rigged) -> dict[str, dict[str, str]]:
    marks = rigged.engines.replica_marks.marks()
    return {engine: {m: mark.reason for m, mark in by.items()} for engine, by in marks.items()}


async def test_a_replica_load_is_marked_and_the_users_load_clears_it(rigged: Rigged) -> None:
    await rigged.engines.controller("ollama").start()
    await _act(rigged, "ollama", "load_model", "m", replica=True)
    mark = rigged.engines.replica_marks.marks()[EngineName("ollama")]["m"]
    assert (mark.reason, mark.by, mark.ttl_s) == ("m waited 18 s on gpu-box", BY, None)
    assert mark.loaded_at == T0, "stamped by the component's clock"
    await _act(rigged, "ollama", "load_model", "m")
    assert _marked(rigged) == {}, "the user's load makes it the user's"


async def test_this_nodes_planner_marks_through_the_local_action(rigged: Rigged) -> None:
    await rigged.engines.controller("ollama").start()
    act = local_action(rigged.engines, BY)
    params = EngineActionParams(
        engine=EngineName("ollama"), action="load_model", model="m", replica=True, reason="hot"
    )
    assert (await act(params)).ok
    assert rigged.engines.replica_marks.marks()[EngineName("ollama")]["m"].by == BY


async def test_a_model_the_user_had_loaded_is_not_marked(rigged: Rigged) -> None:
    await rigged.engines.controller("ollama").start()
    await _act(rigged, "ollama", "load_model", "m")
    await _act(rigged, "ollama", "load_model", "m", replica=True)
    assert _marked(rigged) == {}


async def test_an_unload_clears_the_mark(rigged: Rigged) -> None:
    await rigged.engines.controller("ollama").start()
    await _act(rigged, "ollama", "load_model", "m", replica=True)
    assert _marked(rigged) == {"ollama": {"m": "m waited 18 s on gpu-box"}}
    await _act(rigged, "ollama", "unload_model", "m")
    assert _marked(rigged) == {} and rigged.ollama.loaded == []


async def test_a_failed_replica_load_marks_nothing(rigged: Rigged) -> None:
    with pytest.raises(errors.Unavailable, match="not running"):
        await _act(rigged, "ollama", "load_model", "m", replica=True)
    assert _marked(rigged) == {}


async def test_only_a_load_can_be_a_replica(rigged: Rigged) -> None:
    with pytest.raises(errors.InvalidParams, match="only load_model"):
        await _act(rigged, "ollama", "unload_model", "m", replica=True)


async def test_unloading_llamacpps_replica_switches_back_to_the_model_it_replaced(
    rigged: Rigged,
) -> None:
    llama = rigged.llama.controller
    await llama.start()
    assert llama.current_model == "alpha"
    await _act(rigged, "llamacpp", "load_model", "beta", replica=True)
    assert llama.current_model == "beta"
    found = rigged.engines.replica_marks.entry("llamacpp", "beta")
    assert found is not None and found.replaced == "alpha"
    with pytest.raises(errors.Conflict, match="holds one model at a time"):
        await _act(rigged, "llamacpp", "unload_model", "alpha")  # not a replica: refused
    await _act(rigged, "llamacpp", "unload_model", "beta")
    assert llama.current_model == "alpha" and llama.running
    assert _marked(rigged) == {}
    with pytest.raises(errors.Conflict, match="holds one model at a time"):
        await _act(rigged, "llamacpp", "unload_model", "alpha")


async def test_unloading_a_replica_that_started_llamacpp_stops_it_again(rigged: Rigged) -> None:
    llama = rigged.llama.controller
    await _act(rigged, "llamacpp", "load_model", "beta", replica=True)
    assert llama.running and llama.current_model == "beta"
    await _act(rigged, "llamacpp", "unload_model", "beta")
    assert llama.status().state == "stopped"
    assert _marked(rigged) == {}


async def test_the_users_load_on_llamacpp_clears_the_replicas_mark(rigged: Rigged) -> None:
    llama = rigged.llama.controller
    await llama.start()
    await _act(rigged, "llamacpp", "load_model", "beta", replica=True)
    await _act(rigged, "llamacpp", "load_model", "alpha")
    assert llama.current_model == "alpha" and _marked(rigged) == {}
