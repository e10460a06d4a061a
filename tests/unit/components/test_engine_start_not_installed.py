"""A start refused because the engine is not installed leaves nothing wanted behind: the engine is
not started by surprise once it is installed later. One that answers on its port all the same is
adopted (and wanted), as before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from backend.protocol import errors
from tests.unit.components.engine_fakes import bundled_manifest, rig

ABSENT = {"detect": [{"path": "/nonexistent/pair-test/ollama"}]}


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


async def test_a_refused_start_records_no_wish(
    session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    engine = rig(bundled_manifest("ollama", ABSENT), session, tmp_path)
    with pytest.raises(errors.NotFound, match="not installed") as refused:
        await engine.controller.start()
    assert refused.value.data == {"engine": "ollama", "action": "install"}
    status = engine.controller.status()
    assert status.desired is None
    assert not engine.world.spawned


async def test_an_engine_that_answers_anyway_is_adopted_and_wanted(
    session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    engine = rig(bundled_manifest("ollama", ABSENT), session, tmp_path)
    engine.world.answering.add(engine.controller.port)
    status = await engine.controller.start()
    assert status.desired is True
    assert status.state == "running"
