"""``PAIR_CPU_POLICY=batch`` fixes the proxy worker as a batch task, all of its threads, even at
rest (the default, adaptive, is tested in test_cpu_policy_adaptive.py)."""

from __future__ import annotations

import os
import sys

import httpx
import pytest

from tests.integration.proxy.conftest import StartProxy, local

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the batch policy is Linux's"
)


async def test_the_fixed_batch_setting_reaches_the_worker_and_its_threads(
    start_proxy: StartProxy, ollama_emulator: str
) -> None:
    proxy = await start_proxy(
        environment={"PAIR_CPU_POLICY": "batch"},
        ollama=local(ollama_emulator, ["tinyllama:latest"]),
    )
    pid = await proxy.wait_serving()
    async with httpx.AsyncClient() as client:  # a request served: whatever threads it makes
        tags = await client.get(proxy.url("ollama") + "/api/tags")
    assert tags.status_code == 200
    threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    assert {t: os.sched_getscheduler(t) for t in threads} == dict.fromkeys(threads, os.SCHED_BATCH)
