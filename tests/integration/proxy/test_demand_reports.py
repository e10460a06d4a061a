"""``proxy:demand`` end to end: requests at a real worker's door reach the broker's component as
demand reports (the model, how many were asked, this node's engine's use), and an idle worker
sends none.

A ProxyComponent under a real Supervisor, its worker a real child process, in front of the
Ollama emulator; the component's ``on_demand`` callback is what the broker wires to the
replica planner.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from backend.components.proxy.component import ProxyComponent
from backend.core.clock import SystemClock
from backend.core.supervisor import Supervisor
from backend.protocol.proxy import DemandReport, ProxyTargets
from backend.workers.proxy.routing.demand import REPORT_EVERY_S
from tests.fakes import RecordingErrors
from tests.integration.proxy.conftest import (
    LOCAL_NODE,
    QUICK_RESTARTS,
    credentials_for,
    free_ports,
    local,
)

MODEL = "llama3.2"
REQUESTS = 3


class Reporting:
    """The component, its supervisor, and every demand report it handed on."""

    def __init__(self, engine_url: str) -> None:
        self.reports: list[DemandReport] = []
        errors = RecordingErrors()
        clock = SystemClock()
        targets = ProxyTargets(
            node_id=LOCAL_NODE, engines={"ollama": [local(engine_url, [f"{MODEL}:latest"])]}
        )
        self.component = ProxyComponent(
            ports=free_ports(),
            errors=errors,
            clock=clock,
            targets=lambda: targets,
            credentials=credentials_for(LOCAL_NODE),
            host="127.0.0.1",
            targets_interval=0.05,
            on_demand=self.reports.append,
        )
        self.supervisor = Supervisor(errors=errors, clock=clock, policy=QUICK_RESTARTS)
        self.supervisor.add(self.component)

    async def wait_for(self, settled: bool, timeout: float = 10.0) -> None:
        """Until the reports count every request (and, if ``settled``, nothing runs or waits)."""
        async with asyncio.timeout(timeout):
            while not self._counted(settled):
                await asyncio.sleep(0.05)

    def _counted(self, settled: bool) -> bool:
        asked = sum(d.requests for r in self.reports for d in r.models if d.model == MODEL)
        if asked < REQUESTS or not self.reports:
            return False
        last = self.reports[-1]
        return not settled or (
            all(d.queued == 0 for d in last.models) and all(u.active == 0 for u in last.local)
        )


@pytest.fixture
async def reporting(ollama_emulator: str) -> AsyncIterator[Reporting]:
    running = Reporting(ollama_emulator)
    running.supervisor.start()
    try:
        async with asyncio.timeout(15):
            while running.component.pid() is None:  # the worker starts
                await asyncio.sleep(0.02)
            await running.component.table_applied()
        yield running
    finally:
        await running.component.close_front_doors()
        await running.supervisor.stop(grace=5.0)


async def test_door_requests_reach_the_broker_as_demand_and_local_use(
    reporting: Reporting,
) -> None:
    door = reporting.component.endpoints()["ollama"]
    before = time.time()
    async with aiohttp.ClientSession() as session:
        for _ in range(REQUESTS):
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
            async with session.post(f"{door}/api/chat", json={**body, "stream": False}) as answer:
                assert answer.status == 200
                await answer.read()
    after = time.time()

    await reporting.wait_for(settled=True)

    demand = [d for r in reporting.reports for d in r.models if d.model == MODEL]
    assert sum(d.requests for d in demand) == REQUESTS
    assert all(d.owners == [LOCAL_NODE] for d in demand)
    used = reporting.component.last_local_use()
    assert [(u.engine, u.model, u.active) for u in used] == [("ollama", f"{MODEL}:latest", 0)]
    assert before <= used[0].last_used_at <= after

    settled = len(reporting.reports)
    await asyncio.sleep(REPORT_EVERY_S * 2.5)
    assert len(reporting.reports) == settled, "an idle worker reports nothing"
