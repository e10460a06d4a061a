"""A launch shaper at work in the engine run: its arguments and environment at each launch,
the ``across`` a load asks for, told when the process is gone, its spread in the status, and
the restart that kills a process stuck on a lost member."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

from backend.components.engines.shaping import LaunchExtras
from backend.protocol.types.base import NodeId
from backend.protocol.types.engines import SpreadShare, SpreadStatus
from tests.fakes import settle
from tests.unit.components.engine_fakes import (
    ControllerRig,
    FakeSettings,
    bundled_manifest,
    rig,
    write_gguf,
)

SPREAD = SpreadStatus(
    model="alpha",
    state="running",
    shares=[SpreadShare(node=NodeId("n"), name="pc", layers=2, bytes=10, memory="ram")],
)


@dataclass
class RecordingShaper:
    """Adds ``--rpc`` when asked to spread; records what it was asked and told."""

    asked: list[tuple[str, Path, tuple[str, ...] | None]] = field(default_factory=list)
    told: list[bool] = field(default_factory=list)  # each release: whether it crashed
    spreading: SpreadStatus | None = None

    async def shape(self, model: str, path: Path, across: tuple[str, ...] | None) -> LaunchExtras:
        self.asked.append((model, path, across))
        if not across:
            self.spreading = None
            return LaunchExtras()
        self.spreading = SPREAD
        return LaunchExtras(("--rpc", "127.0.0.1:1"), {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})

    async def released(self, *, crashed: bool) -> None:
        self.told.append(crashed)

    def spread(self) -> SpreadStatus | None:
        return self.spreading


@pytest.fixture
async def shaped(tmp_path: Path) -> AsyncIterator[tuple[ControllerRig, RecordingShaper]]:
    store = tmp_path / "models" / "llamacpp"
    store.mkdir(parents=True)
    write_gguf(store / "alpha.gguf")
    shaper = RecordingShaper()
    async with aiohttp.ClientSession() as session:
        made = rig(
            bundled_manifest("llamacpp"),
            session,
            tmp_path,
            FakeSettings(parallel=1, context=1024),
            shaper=shaper,
        )
        await made.controller.detect()
        yield made, shaper
        for process in made.world.spawned:
            process.finish_output()
        await made.controller.shutdown()


async def test_a_load_across_members_launches_with_the_shapers_arguments(
    shaped: tuple[ControllerRig, RecordingShaper], tmp_path: Path
) -> None:
    made, shaper = shaped
    await made.controller.start()
    assert made.world.argvs[0][-2:] != ["--rpc", "127.0.0.1:1"]
    status = await made.controller.switch_model("alpha", ("laptop",))
    path = tmp_path / "models" / "llamacpp" / "alpha.gguf"
    assert shaper.asked == [("alpha", path, None), ("alpha", path, ("laptop",))]
    assert made.world.argvs[-1][-2:] == ["--rpc", "127.0.0.1:1"]
    assert status.spread == SPREAD
    assert shaper.told == [False], "the first process was stopped, not crashed"


async def test_loading_the_served_model_again_keeps_its_spread(
    shaped: tuple[ControllerRig, RecordingShaper],
) -> None:
    made, shaper = shaped
    await made.controller.switch_model("alpha", ("laptop",))
    launches = len(made.world.argvs)
    await made.controller.switch_model("alpha")  # a door's request for the model it serves
    assert len(made.world.argvs) == launches
    await made.controller.switch_model("alpha", ())  # this computer alone, asked for
    assert len(made.world.argvs) == launches + 1
    assert shaper.asked[-1][2] == ()
    assert made.controller.status().spread is None


async def test_a_crash_is_told_and_the_restart_asks_for_the_same_spread(
    shaped: tuple[ControllerRig, RecordingShaper],
) -> None:
    made, shaper = shaped
    await made.controller.switch_model("alpha", ("laptop",))
    made.world.spawned[-1].exit(134)  # llama.cpp aborts when an RPC connection breaks
    await settle()
    assert shaper.told[-1] is True
    delay = made.controller._life.restart_in
    assert delay is not None
    await made.clock.advance(delay)
    for _ in range(50):  # the relaunch waits for readiness on the test's clock
        if made.controller.status().state == "running":
            break
        await made.clock.advance(0.5)
        await settle()
        # Its probe is a real HTTP request: a loaded machine answers it in real time.
        await asyncio.sleep(0.02)
    assert shaper.asked[-1][2] == ("laptop",)
    assert made.controller.status().state == "running"


async def test_a_restart_for_a_lost_member_kills_the_stuck_process_at_once(
    shaped: tuple[ControllerRig, RecordingShaper],
) -> None:
    made, _ = shaped
    await made.controller.start()
    await made.controller.restart()
    assert made.world.spawned[0].returncode == -15, "asked to stop first"
    await made.controller.restart(kill=True)
    assert made.world.spawned[1].returncode == -9
