"""The engines component and the exclusive gate: every operation that changes what an engine
serves waits for the gate and only then touches the engine (the gate before the engine's lock);
pulls, lists and the scheduler's own model switch do not wait. Also the store models in
``engine:models`` and the restart that follows changed launch settings. Controllers run over
fake drivers; Ollama's HTTP answers come from an in-process aiohttp server."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from backend.components.engines import updater
from backend.components.engines import versions as releases
from backend.components.engines.component import EnginesComponent
from backend.components.engines.exclusive import ExclusiveKind
from backend.components.engines.launch import LaunchSettings
from backend.protocol import errors
from backend.protocol.types.engines import (
    EngineActionName,
    EngineModelsChanged,
    InstallProgressed,
    ModelDetails,
    PullProgressed,
)
from tests.fakes import settle
from tests.support.ports import free_port
from tests.unit.components.engine_fakes import (
    ControllerRig,
    FakeSettings,
    FakeWorld,
    RecordedEvents,
    bundled_manifest,
    engines_over,
    eventually,
    rig,
    write_gguf,
)

Asked = tuple[str, ExclusiveKind, str | None]


class ClosedGate:
    """An exclusive gate that records who asked and grants only once the test opens it."""

    def __init__(self) -> None:
        self.asked: list[Asked] = []
        self.granted: list[Asked] = []
        self.opened = asyncio.Event()

    @contextlib.asynccontextmanager
    async def hold(
        self, engine: str, kind: ExclusiveKind, model: str | None = None
    ) -> AsyncIterator[None]:
        self.asked.append((engine, kind, model))
        await self.opened.wait()
        self.granted.append((engine, kind, model))
        yield


@dataclass
class FakeOllama:
    """The few Ollama answers the model actions and the watcher need; records every request."""

    requests: list[str] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self.answer)
        return app

    async def answer(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(f"{request.method} {request.path}")
        if request.path == "/api/tags":
            return web.json_response({"models": [{"name": "m", "size": 7}]})
        if request.path == "/api/ps":
            return web.json_response({"models": []})
        if request.path == "/api/pull":
            return web.Response(text=json.dumps({"status": "success"}) + "\n")
        return web.json_response({})

    def touched(self, path: str) -> bool:
        return any(request.endswith(path) for request in self.requests)


@dataclass
class Rigged:
    """The component over rigged controllers (llama.cpp owned, Ollama adopted)."""

    engines: EnginesComponent
    gate: ClosedGate
    llama: ControllerRig
    ollama: ControllerRig
    events: RecordedEvents
    settings: FakeSettings
    server: FakeOllama
    store: Path


@pytest.fixture
async def rigged(tmp_path: Path) -> AsyncIterator[Rigged]:
    store = tmp_path / "models" / "llamacpp"
    store.mkdir(parents=True)
    write_gguf(store / "alpha.gguf")
    write_gguf(store / "beta.gguf", architecture="qwen2", context_length=1024)
    # What a port move builds on: found at this Python, no health probes.
    override = {"detect": [{"path": sys.executable}], "runtime": {"health": None}}
    (tmp_path / "engines").mkdir()
    (tmp_path / "engines" / "llamacpp.json").write_text(json.dumps(override))
    fake = FakeOllama()
    async with aiohttp.ClientSession() as session, TestServer(fake.app()) as server:
        world = FakeWorld()
        world.answering.add(server.port)  # Ollama runs already: adopted
        settings = FakeSettings(parallel=2, context=4096)
        llama = rig(bundled_manifest("llamacpp"), session, tmp_path, settings, world)
        ollama_manifest = bundled_manifest("ollama", {"runtime": {"port": server.port}})
        ollama = rig(ollama_manifest, session, tmp_path, world=world)
        rigs = {"llamacpp": llama, "ollama": ollama}
        engines, events = engines_over(tmp_path, rigs, settings=settings)
        gate = ClosedGate()
        engines.bind_gate(gate)
        for controller in engines.controllers.values():
            await controller.detect()
        yield Rigged(engines, gate, llama, ollama, events, settings, fake, store)
        for process in world.spawned:
            process.finish_output()
        for controller in engines.controllers.values():
            await controller.shutdown()


async def _waiting_at_gate(rigged: Rigged, asked: list[Asked]) -> None:
    await eventually(lambda: rigged.gate.asked == asked)
    await settle()


# -- every exclusive operation waits for the gate, then touches the engine ---------------------


@pytest.mark.parametrize(
    ("action", "kind", "path"),
    [
        ("load_model", "load", "/api/generate"),
        ("unload_model", "unload", "/api/generate"),
        ("delete_model", "delete", "/api/delete"),
    ],
)
async def test_model_actions_of_an_http_engine_wait_for_the_gate(
    rigged: Rigged, action: EngineActionName, kind: ExclusiveKind, path: str
) -> None:
    await rigged.ollama.controller.start()
    running = asyncio.ensure_future(rigged.engines.run_action("ollama", action, "m"))
    await _waiting_at_gate(rigged, [("ollama", kind, "m")])
    assert not rigged.server.touched(path), "nothing reaches the engine before the gate"
    rigged.gate.opened.set()
    assert (await running).ok
    assert rigged.server.touched(path)


async def test_a_refused_action_is_refused_before_waiting_at_the_gate(rigged: Rigged) -> None:
    with pytest.raises(errors.Unavailable, match="not running"):
        await rigged.engines.run_action("ollama", "load_model", "m")
    with pytest.raises(errors.InvalidParams, match="needs a model"):
        await rigged.engines.run_action("llamacpp", "delete_model", " ")
    with pytest.raises(errors.InvalidParams, match="Ollama pulls models by name"):
        await rigged.engines.run_action("ollama", "pull_model", "m", url="http://x/m.gguf")
    with pytest.raises(errors.InvalidParams, match=r"give the URL of a \.gguf file"):
        await rigged.engines.run_action("llamacpp", "pull_model", "qwen")
    assert rigged.gate.asked == []


async def test_pulls_and_lists_do_not_wait_for_the_gate(rigged: Rigged) -> None:
    await rigged.ollama.controller.start()
    await rigged.engines.run_action("ollama", "pull_model", "m")
    assert (await rigged.engines.run_action("ollama", "list_models", None)).names == ["m"]
    payload = (rigged.store / "alpha.gguf").read_bytes()

    async def model(_: web.Request) -> web.Response:
        return web.Response(body=payload)

    app = web.Application()
    app.router.add_get("/gamma.gguf", model)
    async with TestServer(app) as files:
        url = f"http://127.0.0.1:{files.port}/gamma.gguf"
        sha256 = hashlib.sha256(payload).hexdigest()
        await rigged.engines.run_action("llamacpp", "pull_model", url, sha256=sha256)
    assert rigged.gate.asked == []
    assert (rigged.store / "gamma.gguf").is_file(), "pulled although llama.cpp is stopped"
    pulls = [e.progress for e in rigged.events.events if isinstance(e, PullProgressed)]
    assert {(p.engine, p.model) for p in pulls} >= {("llamacpp", "gamma"), ("ollama", "m")}
    assert [p.stage for p in pulls if p.engine == "llamacpp" and p.done] == ["success"]
    listed = await rigged.engines.run_action("llamacpp", "list_models", None)
    assert listed.names == ["alpha", "beta", "gamma"]


async def test_a_restart_waits_for_the_gate(rigged: Rigged) -> None:
    await rigged.llama.controller.start()
    restarting = asyncio.ensure_future(rigged.engines.restart("llamacpp"))
    await _waiting_at_gate(rigged, [("llamacpp", "restart", None)])
    assert not rigged.llama.world.spawned[0].stopped
    rigged.gate.opened.set()
    status = await restarting
    assert rigged.llama.world.spawned[0].stopped and status.pid == 1001


async def test_a_port_move_of_a_running_engine_waits_for_the_gate(rigged: Rigged) -> None:
    engines, llama = rigged.engines, rigged.llama.controller
    moved = await engines.set_port("llamacpp", free_port())
    assert rigged.gate.asked == [], "a stopped engine moves at once"
    await llama.start()
    port = free_port()
    moving = asyncio.ensure_future(engines.set_port("llamacpp", port))
    await _waiting_at_gate(rigged, [("llamacpp", "restart", None)])
    assert llama.port == moved.port and not rigged.llama.world.spawned[0].stopped
    rigged.gate.opened.set()
    status = await moving
    assert (status.port, status.state, status.pid) == (port, "running", 1001)


async def test_an_update_stages_first_then_waits_for_the_gate_to_replace(
    rigged: Rigged, monkeypatch: pytest.MonkeyPatch
) -> None:
    llama = rigged.llama.controller
    steps: list[str] = []

    async def refusal() -> str | None:
        return None

    async def latest(*, fresh: bool) -> releases.Latest:
        return releases.Latest("2.0")

    async def installed() -> str | None:
        return "1.0"

    async def stage(*_: object, **__: object) -> dict[str, str]:
        steps.append("staged")
        return {}

    async def replace(*_: object, **__: object) -> None:
        steps.append("replaced")

    async def discard(*_: object) -> None:
        return None

    monkeypatch.setattr(llama, "_update_refusal", refusal)
    monkeypatch.setattr(llama, "_latest_release", latest)
    monkeypatch.setattr(llama, "_installed_version", installed)
    monkeypatch.setattr(updater, "stage", stage)
    monkeypatch.setattr(updater, "replace", replace)
    monkeypatch.setattr(updater, "discard", discard)
    await llama.start()
    updating = asyncio.ensure_future(rigged.engines.update("llamacpp"))
    await _waiting_at_gate(rigged, [("llamacpp", "update", None)])
    assert steps == ["staged"], "downloaded and staged outside the gate"
    assert not rigged.llama.world.spawned[0].stopped and not llama.relaunching
    rigged.gate.opened.set()
    status = await updating
    assert steps == ["staged", "replaced"]
    assert status.state == "running" and status.pid == 1001
    progress = [e.progress for e in rigged.events.events if isinstance(e, InstallProgressed)]
    assert progress[-1].done and progress[-1].stage == "updated"


async def test_a_load_of_llamacpp_waits_for_the_gate_as_a_switch(rigged: Rigged) -> None:
    llama = rigged.llama.controller
    await llama.start()
    assert llama.current_model == "alpha"
    loading = asyncio.ensure_future(rigged.engines.run_action("llamacpp", "load_model", "beta"))
    await _waiting_at_gate(rigged, [("llamacpp", "switch", "beta")])
    assert llama.current_model == "alpha" and len(rigged.llama.world.spawned) == 1
    rigged.gate.opened.set()
    assert (await loading).ok
    assert llama.current_model == "beta"
    assert rigged.settings.remembered == [("llamacpp", "beta")]
    changed = [e for e in rigged.events.events if isinstance(e, EngineModelsChanged)][-1]
    assert changed.models.loaded_by_engine["llamacpp"] == ["beta"]


async def test_a_delete_waits_for_the_gate_and_the_served_model_is_refused(
    rigged: Rigged,
) -> None:
    await rigged.llama.controller.start()
    with pytest.raises(errors.Conflict, match=r"alpha is the model .* serves right now"):
        await rigged.engines.run_action("llamacpp", "delete_model", "alpha")
    with pytest.raises(errors.Conflict, match="holds one model at a time"):
        await rigged.engines.run_action("llamacpp", "unload_model", "alpha")
    with pytest.raises(errors.NotFound, match="no model 'gone'"):
        await rigged.engines.run_action("llamacpp", "delete_model", "gone")
    assert rigged.gate.asked == [], "refused without draining the engine"
    deleting = asyncio.ensure_future(rigged.engines.run_action("llamacpp", "delete_model", "beta"))
    await _waiting_at_gate(rigged, [("llamacpp", "delete", "beta")])
    assert (rigged.store / "beta.gguf").exists()
    rigged.gate.opened.set()
    assert (await deleting).ok
    assert not (rigged.store / "beta.gguf").exists()


# -- the scheduler's switch and the order gate, then lock ---------------------------------------


async def test_the_schedulers_switch_takes_no_gate_and_returns_the_new_instance(
    rigged: Rigged,
) -> None:
    llama = rigged.llama.controller
    await llama.start()
    instance = await rigged.engines.switch_model("llamacpp", "beta")
    assert rigged.gate.asked == []
    assert instance == llama.instance == 1001 and llama.current_model == "beta"
    assert rigged.settings.remembered == [("llamacpp", "beta")]
    changed = [e for e in rigged.events.events if isinstance(e, EngineModelsChanged)][-1]
    assert changed.models.loaded_by_engine["llamacpp"] == ["beta"], "listed before returning"
    with pytest.raises(errors.NotFound, match="no model 'gone'"):
        await rigged.engines.switch_model("llamacpp", "gone")
    assert llama.current_model == "beta"


async def test_an_operation_waiting_at_the_gate_does_not_hold_the_engine_lock(
    rigged: Rigged,
) -> None:
    llama = rigged.llama.controller
    await llama.start()
    restarting = asyncio.ensure_future(rigged.engines.restart("llamacpp"))
    await _waiting_at_gate(rigged, [("llamacpp", "restart", None)])
    async with asyncio.timeout(5):
        assert await rigged.engines.switch_model("llamacpp", "beta") == 1001
    assert not restarting.done()
    rigged.gate.opened.set()
    assert (await restarting).pid == 1002
    assert llama.current_model == "beta", "the restart keeps the model switched to"


async def test_a_failed_switch_raises_the_engines_reason_and_lists_it_as_serving_nothing(
    rigged: Rigged,
) -> None:
    await rigged.llama.controller.start()
    rigged.llama.world.fail_next = ["failed to load model"]
    with pytest.raises(errors.InternalError, match="failed to load model"):
        await rigged.engines.switch_model("llamacpp", "beta")
    assert rigged.llama.controller.status().state == "error"
    changed = [e for e in rigged.events.events if isinstance(e, EngineModelsChanged)][-1]
    assert changed.models.loaded_by_engine["llamacpp"] == []


# -- listing and settings ------------------------------------------------------------------------


async def test_engine_models_lists_the_store_running_or_not_with_details(rigged: Rigged) -> None:
    stopped = await rigged.engines.models()
    assert stopped.by_engine == {"llamacpp": ["alpha", "beta"]}
    assert stopped.loaded_by_engine == {"llamacpp": []}
    assert stopped.details_by_engine["llamacpp"]["beta"] == ModelDetails(
        file="beta.gguf", architecture="qwen2", quantization="Q8_0", context_length=1024
    )
    sizes = stopped.sizes_by_engine["llamacpp"]
    assert sizes["alpha"] == (rigged.store / "alpha.gguf").stat().st_size
    assert rigged.engines.last_models() == {}, "the router sees running engines only"
    await rigged.llama.controller.start()
    running = await rigged.engines.models()
    assert running.loaded_by_engine["llamacpp"] == ["alpha"]
    assert running.slots_by_engine["llamacpp"] == {"alpha": 2}
    assert rigged.engines.last_models() == {"llamacpp": (["alpha", "beta"], ["alpha"])}


async def test_a_file_added_outside_pair_is_listed_at_the_next_check(rigged: Rigged) -> None:
    await rigged.engines.models()
    write_gguf(rigged.store / "delta.gguf")
    await rigged.engines._check_models(force=False)
    changed = [e for e in rigged.events.events if isinstance(e, EngineModelsChanged)]
    assert changed and changed[-1].models.by_engine["llamacpp"] == ["alpha", "beta", "delta"]


async def test_changed_slots_or_context_restart_the_engine_through_the_gate(
    rigged: Rigged,
) -> None:
    llama = rigged.llama.controller
    await llama.start()
    rigged.settings.current = LaunchSettings(parallel=2, context=4096, model="beta")
    rigged.engines._follow_settings()
    await settle()
    assert rigged.gate.asked == [], "another model setting applies at the next start"
    rigged.settings.current = LaunchSettings(parallel=4, context=4096)
    rigged.engines._follow_settings()
    rigged.engines._follow_settings()  # one restart, however often it is checked
    await _waiting_at_gate(rigged, [("llamacpp", "restart", None)])
    rigged.gate.opened.set()
    await eventually(lambda: llama.status().pid == 1001 and llama.running)
    argv = rigged.llama.world.argvs[-1]
    assert argv[argv.index("-np") + 1] == "4" and llama.status().slots == 4
    rigged.engines._follow_settings()
    await settle()
    assert len(rigged.gate.asked) == 1, "launched with them now: nothing more to do"


async def test_an_engine_being_relaunched_keeps_its_last_models_for_the_router(
    rigged: Rigged,
) -> None:
    llama = rigged.llama.controller
    await llama.start()
    await rigged.engines.models()
    rigged.llama.world.spawning.clear()  # hold the new launch back
    switching = asyncio.ensure_future(rigged.engines.switch_model("llamacpp", "beta"))
    await eventually(lambda: llama.relaunching)
    assert not llama.running and llama.instance == 0
    assert rigged.engines.last_models() == {"llamacpp": (["alpha", "beta"], ["alpha"])}
    rigged.llama.world.spawning.set()
    assert await switching == 1001 and not llama.relaunching
    assert rigged.engines.last_models() == {"llamacpp": (["alpha", "beta"], ["beta"])}
