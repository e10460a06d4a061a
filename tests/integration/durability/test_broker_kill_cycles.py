"""kill -9 of the real ``pair node`` while clients change settings, add manual nodes and send
requests through the front door: after each restart the broker itself reports every setting
and node it acknowledged, and every job ``pair.db`` had committed, with no job left open."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sqlite3
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from backend.components.jobs.store import DEFAULT_KEEP_FINISHED
from backend.protocol.errors import RpcError
from tests.integration.conftest import Broker, Client
from tests.integration.durability import records
from tests.integration.durability.conftest import cycles

StartBroker = Callable[..., Broker]
CYCLES = cycles(default=3, long=30)
CONCURRENT_REQUESTS = 6
NODE_FIELDS = ("id", "address", "port", "name", "added_at")
OPEN_STATES = ("in_flight", "running")
# Of the 1,000 finished jobs the broker keeps (DEFAULT_KEEP_FINISHED), those checked.
KEPT_JOBS_CHECKED = DEFAULT_KEEP_FINISHED // 2
# Raised when a store could not be read at start and was set aside.
CORRUPTION_ERRORS = frozenset({"settings:corrupt", "store:corrupt"})


@dataclass
class Acknowledged:
    """What the broker said it had done, and the calls a kill may have cut."""

    setting: int | None = None
    settings_uncertain: set[int] = field(default_factory=set)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    nodes_uncertain: set[str] = field(default_factory=set)
    # Committed in pair.db: key -> (seq, created_at).
    jobs: dict[str, tuple[int, float]] = field(default_factory=dict)
    records: int = 0


async def _set_settings(client: Client, acked: Acknowledged, first: int) -> None:
    number = first
    while True:
        acked.settings_uncertain.add(number)
        await client.call("settings/set", {"values": records.settings_values(number)})
        acked.setting = number
        acked.settings_uncertain = {n for n in acked.settings_uncertain if n > number}
        acked.records += 1
        number += 1


async def _add_nodes(client: Client, acked: Acknowledged, cycle: int) -> None:
    for number in range(1, 10_000):
        port = 1 + (cycle * 1000 + number) % 65535
        node_id = f"manual:127.0.0.1:{port}"
        acked.nodes_uncertain.add(node_id)
        node = await client.call(
            "node/add", {"address": "127.0.0.1", "port": port, "name": f"c{cycle} n{number}"}
        )
        acked.nodes[node["id"]] = {name: node.get(name) for name in NODE_FIELDS}
        acked.nodes_uncertain.discard(node_id)
        acked.records += 1


async def _send_requests(door: str) -> None:
    body = {"model": "tinyllama:latest", "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                async with session.post(door + "/api/chat", json={**body, "stream": False}) as r:
                    await r.read()


def _committed_jobs(database: Path) -> list[tuple[str, int, float]]:
    uri = f"file:{database}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5)) as db:
        return db.execute("SELECT key, seq, created_at FROM jobs").fetchall()


async def _watch_jobs(database: Path, acked: Acknowledged) -> None:
    """Note every job row another reader can see: committed, so it must survive the kill."""
    while True:
        for key, seq, created_at in await asyncio.to_thread(_committed_jobs, database):
            if acked.jobs.get(key, (0, 0.0))[0] < seq:
                acked.records += key not in acked.jobs
                acked.jobs[key] = (seq, created_at)
        await asyncio.sleep(0.05)


async def _check(client: Client, acked: Acknowledged) -> list[str]:
    """What the restarted broker lost of what it had acknowledged."""
    errors = {entry["id"] for entry in (await client.call("status"))["errors"]}
    problems = [f"{name} raised" for name in CORRUPTION_ERRORS & errors]
    values = (await client.call("settings/get"))["values"]
    allowed: set[int | None] = {acked.setting, *acked.settings_uncertain}
    if records.settings_number(values) not in allowed:
        problems.append(f"settings: {values.get('node_name')}, acknowledged {acked.setting}")
    listed = {node["id"]: node for node in await client.call("nodes/list")}
    for node_id, node in acked.nodes.items():
        found = listed.get(node_id)
        if found is None or {name: found.get(name) for name in NODE_FIELDS} != node:
            problems.append(f"manual node {node}: found {found}")
    for node_id in listed.keys() - acked.nodes.keys() - acked.nodes_uncertain:
        problems.append(f"manual node {node_id} was never added")
    snapshot = await client.call("jobs:get-initial", {"limit": 1000})
    jobs = {job["key"]: job for job in snapshot["workloads"]}
    for key, (seq, _) in _newest(acked.jobs):
        if key not in jobs or jobs[key]["seq"] < seq:
            problems.append(f"job {key} seq {seq}: found {jobs.get(key)}")
    problems += [f"job left open: {job}" for job in jobs.values() if job["state"] in OPEN_STATES]
    return problems


def _newest(jobs: dict[str, tuple[int, float]]) -> list[tuple[str, tuple[int, float]]]:
    """The jobs the broker must still have: it keeps the newest 1,000 finished ones, counting
    some this test may not have seen committed, so only the newest ``KEPT_JOBS_CHECKED``."""
    by_age = sorted(jobs.items(), key=lambda item: (item[1][1], item[0]), reverse=True)
    return by_age[:KEPT_JOBS_CHECKED]


async def _run_until_killed(
    broker: Broker, client: Client, acked: Acknowledged, cycle: int, rng: random.Random
) -> None:
    engine = await client.call("engine:start", {"engine": "ollama"}, timeout=60)
    assert engine["state"] == "running"
    door = (await client.call("status"))["front_doors"]["ollama"]
    first_setting = max([acked.setting or 0, *acked.settings_uncertain]) + 1
    work: list[Coroutine[Any, Any, None]] = [
        _set_settings(client, acked, first_setting),
        _add_nodes(client, acked, cycle),
        _watch_jobs(broker.data_dir / records.DATABASE_FILE, acked),
        *(_send_requests(door) for _ in range(CONCURRENT_REQUESTS)),
    ]
    tasks = [asyncio.create_task(step) for step in work]
    await asyncio.sleep(rng.uniform(0.5, 2.0))
    os.kill(broker.process.pid, signal.SIGKILL)
    await asyncio.to_thread(broker.process.wait)
    for task in tasks:
        task.cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    unexpected = [o for o in outcomes if not isinstance(o, asyncio.CancelledError | RpcError)]
    assert unexpected == [], unexpected


@pytest.mark.timeout(max(120, CYCLES * 30))
async def test_kill_9_of_the_broker_loses_nothing_it_acknowledged(
    start_broker: StartBroker, paced_ollama_node: Path
) -> None:
    rng = random.Random(1201)
    acked = Acknowledged()
    problems: list[str] = []
    for cycle in range(CYCLES + 1):  # the last start only checks
        broker = start_broker(data_dir=paced_ollama_node)
        async with broker.connect(engine_events=False) as client:
            problems += [f"after kill {cycle}: {p}" for p in await _check(client, acked)]
            if cycle < CYCLES:
                await _run_until_killed(broker, client, acked, cycle, rng)
    print(
        f"\nbroker kill cycles: {CYCLES} kills, {acked.records} records acknowledged "
        f"({len(acked.jobs)} jobs committed, {len(acked.nodes)} manual nodes, settings "
        f"update {acked.setting}), {len(problems)} problems"
    )
    assert problems == []
    assert acked.jobs and acked.nodes and acked.setting, "a writer acknowledged nothing"
