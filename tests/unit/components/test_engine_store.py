"""An engine that serves one model of PAIR's store (llama.cpp): its manifest sections, the launch
settings, which model a launch picks, and the controller launching, switching and failing to
switch it, driven by fake drivers (no subprocesses)."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from backend.components.engines import launch
from backend.components.engines.launch import LaunchPlan, LaunchSettings, SettingsValues
from backend.components.engines.manifest import (
    ManifestError,
    ModelStoreSpec,
    SchedulerSpec,
    build,
    bundled_documents,
    deep_merge,
    load_all,
)
from backend.components.engines.model_store import ModelStore
from backend.components.settings import schema
from backend.components.settings.service import SettingsService
from backend.protocol import errors
from backend.protocol.types.base import EngineName
from tests.fakes import FakeClock, settle
from tests.unit.components.engine_fakes import (
    ControllerRig,
    FakeSettings,
    bundled_manifest,
    eventually,
    rig,
    write_gguf,
)

LLAMACPP = EngineName("llamacpp")

# -- manifest ------------------------------------------------------------------------------------


def test_llamacpp_keeps_a_model_store_in_the_data_dir_and_tells_the_scheduler_its_slots() -> None:
    manifests = load_all(Path("/nonexistent")).manifests
    llamacpp = manifests["llamacpp"]
    assert llamacpp.model_store == ModelStoreSpec(format="gguf", dir="{data_dir}/models/llamacpp")
    assert llamacpp.scheduler == SchedulerSpec(
        single_model=True,
        slots_path="/slots",
        erase_path="/slots/{id}?action=erase",
        save_path="/slots/{id}?action=save",
        restore_path="/slots/{id}?action=restore",
        slot_field="id_slot",
    )
    args = llamacpp.runtime.args
    assert args[args.index("-m") + 1] == "{model_path}"
    assert args[args.index("--alias") + 1] == "{model}", "clients see the store's short name"
    assert args[args.index("--slot-save-path") + 1] == "{slot_dir}", "else erase answers 501"
    for other in ("ollama", "lmstudio"):
        assert (manifests[other].model_store, manifests[other].scheduler) == (None, None)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"scheduler": {"erase_path": "/slots/0?action=erase"}}, "needs {id}"),
        ({"scheduler": {"slots_path": "slots"}}, "must be a path starting with /"),
        ({"scheduler": {"slot_field": ""}}, "slot_field must not be empty"),
        ({"scheduler": {"save_path": "/slots/0?action=save"}}, "save_path needs {id}"),
        ({"scheduler": {"restore_path": None}}, "save_path and restore_path go together"),
        ({"scheduler": {"surprise": 1}}, "unknown field"),
        ({"model_store": {"format": "gguf", "dir": " "}}, "must name a folder"),
        ({"model_store": {"format": "safetensors"}}, "Invalid enum value 'safetensors'"),
    ],
)
def test_invalid_store_and_scheduler_sections_are_refused(
    change: dict[str, Any], needle: str
) -> None:
    document = deep_merge(bundled_documents()["llamacpp"], change)
    with pytest.raises(ManifestError, match=needle):
        build(document, "override")


def test_a_model_store_needs_an_engine_pair_launches() -> None:
    document = deep_merge(
        bundled_documents()["lmstudio"], {"model_store": {"format": "gguf", "dir": "/m"}}
    )
    with pytest.raises(ManifestError, match="needs a process runtime"):
        build(document, "override")


# -- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("llamacpp_parallel", 0, "at least 1"),
        ("llamacpp_parallel", 17, "at most 16"),
        ("llamacpp_parallel", 2.5, "expects an integer"),
        ("llamacpp_context", 255, "at least 256"),
        ("llamacpp_context", 1048577, "at most 1048576"),
        ("llamacpp_model", 3, "expects a string"),
    ],
)
def test_engine_settings_are_bounded(key: str, value: object, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        schema.validate(key, value)


def test_the_settings_service_gives_launch_settings_and_keeps_the_loaded_model(
    tmp_path: Path,
) -> None:
    service = SettingsService(
        tmp_path / "settings.json", clock=FakeClock(), on_change=lambda _: None, on_corrupt=print
    )
    values = SettingsValues(lambda: service.snapshot().values, service.update)
    assert values.launch(LLAMACPP) == LaunchSettings(parallel=2, context=4096, model="")
    assert values.launch(EngineName("ollama")) is None, "no settings: the manifest's params"
    service.update({"llamacpp_parallel": 4, "llamacpp_context": 2048})
    values.remember_model(LLAMACPP, "qwen")
    values.remember_model(EngineName("ollama"), "ignored")
    assert values.launch(LLAMACPP) == LaunchSettings(parallel=4, context=2048, model="qwen")
    view = service.view()
    assert (view.llamacpp_parallel, view.llamacpp_context, view.llamacpp_model) == (
        4,
        2048,
        "qwen",
    )
    assert "ollama_model" not in service.snapshot().values


def test_a_launch_plan_fills_the_placeholders_and_knows_when_settings_changed() -> None:
    plan = LaunchPlan("a", Path("/m/a.gguf"), LaunchSettings(2, 4096, "a"))
    assert plan.values() == {
        "model": "a",
        "model_path": "/m/a.gguf",
        "parallel": "2",
        "context": "4096",
    }
    assert not plan.differs(LaunchSettings(2, 4096, "b")), "the model changes at next start"
    assert plan.differs(LaunchSettings(3, 4096))
    assert plan.differs(LaunchSettings(2, 8192))
    assert not plan.differs(None)
    assert LaunchPlan("a", Path("/m/a.gguf"), None).values() == {
        "model": "a",
        "model_path": "/m/a.gguf",
    }


async def test_a_launch_picks_the_asked_the_remembered_or_the_first_model(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "store")
    with pytest.raises(errors.NotFound, match="pair model pull llamacpp <URL"):
        await launch.plan(store, None, None, engine=LLAMACPP, display_name="llama.cpp")
    store.root.mkdir()
    for name in ("b", "a"):
        write_gguf(store.root / f"{name}.gguf")

    async def chosen(settings: LaunchSettings | None, model: str | None = None) -> str:
        planned = await launch.plan(store, settings, model, engine=LLAMACPP, display_name="x")
        assert planned.path == store.root / f"{planned.model}.gguf"
        return planned.model

    assert await chosen(None) == "a"
    assert await chosen(LaunchSettings(2, 4096, "b")) == "b"
    assert await chosen(LaunchSettings(2, 4096, "gone")) == "a", "a lost choice gives way"
    assert await chosen(LaunchSettings(2, 4096, "b"), "a") == "a"
    with pytest.raises(errors.NotFound, match="no model 'gone'"):
        await chosen(None, "gone")


# -- the controller ------------------------------------------------------------------------------


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as made:
        yield made


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """The data dir's llama.cpp store with two models."""
    folder = tmp_path / "models" / "llamacpp"
    folder.mkdir(parents=True)
    write_gguf(folder / "alpha.gguf")
    write_gguf(folder / "beta.gguf", context_length=1024)
    return folder


@pytest.fixture
async def llama(
    session: aiohttp.ClientSession, tmp_path: Path, store_dir: Path
) -> AsyncIterator[ControllerRig]:
    made = rig(
        bundled_manifest("llamacpp"), session, tmp_path, FakeSettings(parallel=3, context=2048)
    )
    await made.controller.detect()
    yield made
    for process in made.world.spawned:
        process.finish_output()
    await made.controller.shutdown()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


async def test_a_start_serves_the_first_model_by_its_short_name_with_the_settings(
    llama: ControllerRig, store_dir: Path, tmp_path: Path
) -> None:
    controller = llama.controller
    assert controller.store is not None and controller.store.root == store_dir
    assert (controller.current_model, controller.instance) == (None, 0)
    status = await controller.start()
    argv = llama.world.argvs[0]
    assert _flag(argv, "-m") == str(store_dir / "alpha.gguf")
    assert _flag(argv, "--alias") == "alpha"
    assert (_flag(argv, "-np"), _flag(argv, "-c")) == ("3", "2048")
    slot_dir = Path(_flag(argv, "--slot-save-path"))
    assert slot_dir == tmp_path / "engines" / "slots" / "llamacpp"
    assert _mode(slot_dir) == 0o700
    assert status.slots == 3, "the slots it was launched with"
    assert (controller.current_model, controller.instance) == ("alpha", status.pid)
    assert not controller.relaunching
    await controller.stop()
    assert (controller.current_model, controller.instance) == (None, 0)


async def test_switching_relaunches_on_the_other_model_and_remembers_it(
    llama: ControllerRig, store_dir: Path
) -> None:
    controller, world = llama.controller, llama.world
    first = (await controller.start()).pid
    world.spawning.clear()  # hold the next launch back to look at the engine meanwhile
    switching = asyncio.ensure_future(controller.switch_model("beta"))
    await eventually(lambda: len(world.argvs) == 1 and world.spawned[0].stopped)
    await settle()
    assert controller.relaunching, "stopped, not running again yet: the router keeps it"
    assert world.spawned[0].stopped and controller.current_model is None
    world.spawning.set()
    status = await switching
    assert not controller.relaunching
    assert status.pid != first and controller.instance == status.pid
    assert controller.current_model == "beta"
    assert _flag(world.argvs[1], "-m") == str(store_dir / "beta.gguf")
    settings = controller._settings
    assert isinstance(settings, FakeSettings) and settings.remembered == [("llamacpp", "beta")]
    again = await controller.switch_model("beta")
    assert again.pid == status.pid, "already serving it: nothing relaunched"
    restarted = await controller.restart()
    assert _flag(world.argvs[-1], "--alias") == "beta", "a restart keeps the remembered model"
    assert restarted.pid != status.pid


async def test_llama_server_answers_embeddings_pooled_as_its_model_declares(
    llama: ControllerRig, store_dir: Path
) -> None:
    write_gguf(store_dir / "embedder.gguf", architecture="bert", pooling=2)  # 2: cls
    controller, world = llama.controller, llama.world
    await controller.start()
    assert "--embeddings" in world.argvs[0], "else /v1/embeddings answers 501"
    assert _flag(world.argvs[0], "--pooling") == "last", "a generative model declares none"
    await controller.switch_model("embedder")
    assert "--embeddings" in world.argvs[1]
    assert _flag(world.argvs[1], "--pooling") == "cls", "an embedding model keeps its own"


async def test_a_switch_to_a_missing_model_changes_nothing(llama: ControllerRig) -> None:
    status = await llama.controller.start()
    with pytest.raises(errors.NotFound, match="no model 'gamma'"):
        await llama.controller.switch_model("gamma")
    assert llama.controller.status().pid == status.pid
    assert len(llama.world.spawned) == 1 and not llama.world.spawned[0].stopped


async def test_a_model_that_fails_to_load_leaves_the_engine_failed_with_its_output(
    llama: ControllerRig,
) -> None:
    await llama.controller.start()
    llama.world.fail_next = ["llama_model_load: error loading model", "failed to load model"]
    with pytest.raises(errors.InternalError, match="failed to load model") as raised:
        await llama.controller.switch_model("beta")
    assert "exited with code 1 before it was ready" in raised.value.message
    status = llama.controller.status()
    assert status.state == "error" and status.error is not None
    assert "failed to load model" in status.error
    assert "engine:start-failed:llamacpp" in llama.errors.open
    assert not llama.controller.relaunching and llama.controller.current_model is None
    settings = llama.controller._settings
    assert isinstance(settings, FakeSettings) and settings.remembered == []


async def test_a_switch_of_a_stopped_engine_starts_it_with_that_model(
    llama: ControllerRig,
) -> None:
    status = await llama.controller.switch_model("beta")
    assert (status.state, status.desired, llama.controller.current_model) == (
        "running",
        True,
        "beta",
    )


async def test_an_empty_store_fails_the_start_saying_how_to_get_a_model(
    session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    made = rig(bundled_manifest("llamacpp"), session, tmp_path)
    await made.controller.detect()
    with pytest.raises(errors.NotFound, match="pair model pull llamacpp <URL"):
        await made.controller.start()
    assert made.world.spawned == [], "no llama-server crash: nothing was started"
    status = made.controller.status()
    assert status.state == "error" and "model store" in (status.error or "")
    await made.controller.shutdown()


async def test_an_engine_without_a_store_has_no_current_model_and_cannot_switch(
    session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    made = rig(bundled_manifest("ollama"), session, tmp_path)
    await made.controller.detect()
    status = await made.controller.start()
    assert made.controller.store is None and made.controller.current_model is None
    assert made.controller.instance == status.pid
    with pytest.raises(errors.InvalidParams, match="keeps no models"):
        await made.controller.switch_model("x")
    made.world.spawned[0].finish_output()
    await made.controller.shutdown()
