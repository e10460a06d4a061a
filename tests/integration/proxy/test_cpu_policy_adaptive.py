"""The proxy worker as the broker starts it follows its requests in flight: every thread a
normal task at rest, a batch task while ``BATCH_AT`` requests are held by the engine, and a
normal one again once they are answered."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass, field

import httpx
import pytest
from aiohttp import web

from backend.workers.cpu_policy import BATCH_AT, POLICY_ENV
from tests.integration.proxy.conftest import StartProxy, local
from tests.support.scripted_server import ScriptedServer

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the batch policy is Linux's"
)


@dataclass
class HoldingEngine(ScriptedServer):
    """An Ollama-shaped engine that holds every ``/api/generate`` until ``release`` is set;
    ``held`` is set once ``BATCH_AT`` are waiting."""

    waiting: int = 0
    held: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/api/generate", self._generate)

    async def _generate(self, _: web.Request) -> web.Response:
        self.waiting += 1
        if self.waiting >= BATCH_AT:
            self.held.set()
        await self.release.wait()
        return web.json_response({"model": "m", "response": "x", "done": True})


def policies(pid: int) -> set[int]:
    """The policies of every thread of process ``pid`` (field 41 of its threads' stat files)."""
    found = set()
    for thread in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{thread}/stat") as stat:
            found.add(int(stat.read().rsplit(")", 1)[1].split()[38]))
    return found


async def wait_for_policy(pid: int, policy: int) -> None:
    """Until every thread of ``pid`` has ``policy`` (the worker switches after it answers)."""
    async with asyncio.timeout(10):
        while policies(pid) != {policy}:
            await asyncio.sleep(0.01)


async def test_the_worker_is_a_batch_task_only_while_many_requests_are_in_flight(
    start_proxy: StartProxy,
) -> None:
    engine = await HoldingEngine().start()
    try:
        proxy = await start_proxy(
            ollama=local(engine.url, ["m"], slots=BATCH_AT), environment={POLICY_ENV: "adaptive"}
        )
        pid = await proxy.wait_serving()
        assert policies(pid) == {os.SCHED_OTHER}
        body = {"model": "m", "prompt": "hi", "stream": False}
        url = proxy.url("ollama") + "/api/generate"
        async with httpx.AsyncClient(timeout=30) as client, asyncio.TaskGroup() as group:
            answers = [
                group.create_task(client.post(url, json=body), name=f"request {n}")
                for n in range(BATCH_AT)
            ]
            await asyncio.wait_for(engine.held.wait(), 10)
            assert policies(pid) == {os.SCHED_BATCH}
            engine.release.set()
        assert [answer.result().status_code for answer in answers] == [200] * BATCH_AT
        await wait_for_policy(pid, os.SCHED_OTHER)
    finally:
        await engine.stop()
