"""Parity rules between the engine manager and the app: a restart after a model delete comes
from the manifest (and the app warns for exactly those engines), a delete whose restart failed
says the model is deleted; an install starts the engine, and the broker's start starts the
engines that are installed and wanted. Controllers run over fake drivers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from app.models.models import restarts_after_delete
from backend.components.engines import actions
from backend.components.engines.manifest import bundled_documents
from backend.protocol import errors
from backend.protocol.types.engines import InstallProgress, PullProgress
from tests.unit.components.engine_fakes import (
    FakeWorld,
    bundled_manifest,
    engines_over,
    rig,
)

APP = Path(__file__).resolve().parents[3] / "app"


def _restarting_engines() -> set[str]:
    """The bundled engines whose ``delete_model`` says ``restart_after``."""
    return {
        name
        for name, document in bundled_documents().items()
        if document.get("actions", {}).get("delete_model", {}).get("restart_after") is True
    }


# -- 7. the restart after a delete comes from the manifest, and the app agrees -----------------


def test_the_app_warns_of_a_restart_after_delete_for_exactly_the_manifests_that_restart() -> None:
    restarting = _restarting_engines()
    assert restarting == {"lmstudio"}, "LM Studio serves its models from an index built at start"
    assert {name for name in bundled_documents() if restarts_after_delete(name)} == restarting
    for path in (APP / "window" / "models_page.py", APP / "controllers" / "models.py"):
        text = path.read_text()
        assert '== "lmstudio"' not in text, f"{path.name} decides by engine name again"


def _with_removable_models(engine: str, models: Path, *, restart_after: bool) -> dict[str, Any]:
    delete = {"http": None, "remove_path": "{models_dir}/{model}", "restart_after": restart_after}
    return {"models_dir": str(models), "actions": {"delete_model": delete}}


def _ignore(_: PullProgress) -> None:
    return None


@pytest.mark.parametrize("restart_after", [True, False])
async def test_a_delete_restarts_whichever_engine_its_manifest_says(
    tmp_path: Path, restart_after: bool
) -> None:
    models = tmp_path / "models"
    (models / "doomed").mkdir(parents=True)
    change = _with_removable_models("ollama", models, restart_after=restart_after)
    async with aiohttp.ClientSession() as session:
        made = rig(bundled_manifest("ollama", change), session, tmp_path)
        await made.controller.detect()
        first = (await made.controller.start()).pid
        result = await actions.run_action(made.controller, "delete_model", "doomed", _ignore)
        assert not (models / "doomed").exists()
        assert result.restarted is restart_after
        assert (made.controller.status().pid != first) is restart_after
        await made.controller.shutdown()


async def test_a_delete_whose_restart_failed_says_the_model_is_deleted(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "doomed").mkdir(parents=True)
    change = _with_removable_models("ollama", models, restart_after=True)
    async with aiohttp.ClientSession() as session:
        made = rig(bundled_manifest("ollama", change), session, tmp_path)
        await made.controller.detect()
        await made.controller.start()
        made.world.fail_next = ["cannot bind"]
        with pytest.raises(errors.InternalError) as failed:
            await actions.run_action(made.controller, "delete_model", "doomed", _ignore)
        assert failed.value.message.startswith("deleted doomed, but Ollama failed to restart: ")
        assert "cannot bind" in failed.value.message
        assert not (models / "doomed").exists()
        await made.controller.shutdown()


# -- 8. an install starts the engine; the broker's start starts the wanted ones ----------------


def _progress(_: InstallProgress) -> None:
    return None


async def test_an_install_starts_the_engine_and_records_that_it_is_wanted(tmp_path: Path) -> None:
    async with aiohttp.ClientSession() as session:
        made = rig(bundled_manifest("ollama"), session, tmp_path)
        status = await made.controller.install_and_start(_progress)
        assert (status.installed, status.state, status.desired) == (True, "running", True)
        assert len(made.world.spawned) == 1
        await made.controller.shutdown()


async def test_an_installed_engine_that_does_not_start_says_the_install_succeeded(
    tmp_path: Path,
) -> None:
    async with aiohttp.ClientSession() as session:
        made = rig(bundled_manifest("ollama"), session, tmp_path)
        made.world.fail_next = ["no GPU"]
        with pytest.raises(errors.InternalError, match="Ollama is installed, but it did not start"):
            await made.controller.install_and_start(_progress)
        assert made.controller.status().installed
        await made.controller.shutdown()


async def test_an_install_of_a_store_engine_without_a_model_leaves_it_stopped(
    tmp_path: Path,
) -> None:
    async with aiohttp.ClientSession() as session:
        made = rig(bundled_manifest("llamacpp"), session, tmp_path)
        status = await made.controller.install_and_start(_progress)
        assert (status.installed, status.state, made.world.spawned) == (True, "stopped", [])


class FakeLedger:
    """Desired states as the store keeps them; no process of a previous broker."""

    def __init__(self, desired: dict[str, bool]) -> None:
        self._desired = desired

    async def desired(self) -> dict[str, bool]:
        return dict(self._desired)

    async def save_desired(self, engine: str, enabled: bool) -> None:
        self._desired[engine] = enabled

    async def record_process(self, engine: str, pid: int, create_time: float) -> None:
        return None

    async def forget_process(self, pid: int) -> None:
        return None

    async def recorded_processes(self) -> list[tuple[int, str, float]]:
        return []


async def test_the_broker_start_starts_the_engines_installed_and_wanted(tmp_path: Path) -> None:
    overrides = tmp_path / "engines"
    overrides.mkdir()
    found = {"detect": [{"path": sys.executable}], "runtime": {"health": None}}
    missing = {"detect": [{"path": str(tmp_path / "nope")}], "runtime": {"health": None}}
    for name, override in (("ollama", found), ("lmstudio", found), ("llamacpp", missing)):
        (overrides / f"{name}.json").write_text(json.dumps(override))
    world = FakeWorld()
    ledger = FakeLedger({"ollama": True, "lmstudio": False, "llamacpp": True})
    engines, _ = engines_over(tmp_path, ledger=ledger, drivers=world.drivers())
    async with aiohttp.ClientSession() as session:
        await engines._build(session)
        states = {status.engine: status.state for status in engines.statuses()}
        assert states == {"ollama": "running", "lmstudio": "stopped", "llamacpp": "not-installed"}
        assert len(world.spawned) == 1
        await engines.prepare_shutdown()
