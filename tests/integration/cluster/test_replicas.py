"""Replicas on demand across three computers, with real brokers and the Ollama emulator.

A holds model M loaded by the user, B has M on disk only (slow to load) and sits idle, C has
another model. A burst of requests for M at A's door queues on A; A's replica planner loads M
on B (a ``replica:load`` job whose note says how long M waited), the burst's later requests
are served by B, and once idle past its TTL B's planner unloads it while A's M (the user's)
stays loaded. With the planner off the same burst loads nothing.

Before the burst A's placement measures B's load time the way users' traffic makes it: a few
requests at once at A's door while B is cold; B, never measured, wins the tie against A's busy
slot, serves one cold and is then unloaded again, until a round's requests all stay on busy A
(placement now charges B's load). A member never measured pays no load in placement and would
take the burst's first requests itself, loading M on its own (docs/PLACEMENT.md), which would
leave the planner nothing to do. Each round starts once A's proxy worker routes by a table that
lists B cold and idle: a request placed by an older table (B still resident, or not yet saying
what it holds) has B's load measured as its time to a first token.
Hosts as in ``test_three_nodes``: network namespaces on a bridge, or loopback addresses.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from backend.components.replicas.status import TTL_ENV
from backend.protocol import methods
from backend.protocol.types.jobs import JobRecord
from backend.workers.proxy.upstream.forward import SERVED_BY_HEADER
from tests.integration.cluster.test_every_model_cluster import _run_on
from tests.integration.cluster.test_three_nodes import (
    Host,
    Node,
    _clients,
    _pair,
    _until,
    hosts,
    start_node,
)
from tests.integration.conftest import Client, free_port
from tests.integration.engines.conftest import write_script

__all__ = ["hosts", "start_node"]  # fixtures

MODEL = "hot:latest"
OTHER = "other-c:latest"
CLIENTS = 3  # concurrent clients of the burst: A's queue keeps two ahead of each request
TOKEN_S = 0.1  # per token: with REPLY_TOKENS, a request takes about a second on one slot
REPLY_TOKENS = 10
# Well above the wait the burst builds on A, so placement keeps the burst on A: on a loaded
# machine A's queue as its table counts it runs a few jobs ahead (job ends reach it late).
B_LOAD_S = 12.0
# A's replicas' TTL, through the product's test knob (``PAIR_REPLICAS_TTL_S``): the setting's
# lowest, 30 s, is long to wait out; this is still several planner rounds, and longer than B
# takes to get the burst's requests once its replica is loaded.
TTL_S = 15.0
SETTING_TTL_S = 30.0  # set too, and overruled by the knob
PLANNER_PERIOD_S = 2.0
SLACK_S = 60.0  # under a loaded machine (4 xdist workers on 2 cores)
WARM_UP_ROUNDS = 6  # B takes one round's request while unmeasured; then A keeps them

# The Ollama emulator standing in for ``ollama serve``, at a steady pace and load time.
_SHIM = """#!{python}
import os, sys
host, _, port = os.environ.get("OLLAMA_HOST", "127.0.0.1:11434").rpartition(":")
argv = [sys.executable, "-m", "backend", "emulate", "ollama", "--host", host, "--port", port,
        "--parallel", os.environ.get("OLLAMA_NUM_PARALLEL", "1"), *ARGS]
if sys.argv[1:] != ["serve"]:
    sys.exit("this shim only knows `ollama serve`")
os.execv(sys.executable, argv)
"""


def _engine(tmp_path: Path, name: str, models: str, load_s: float) -> dict[str, Any]:
    """An engine override whose Ollama is the paced emulator with ``models`` on disk."""
    args = [
        *("--models", models, "--load-delay", str(load_s)),
        *("--token-delay", str(TOKEN_S), "--reply-tokens", str(REPLY_TOKENS)),
        *("--prompt-token-delay", "0", "--first-token-delay", "0"),
    ]
    shim = write_script(tmp_path / f"paced-ollama-{name}", _SHIM.replace("*ARGS", repr(args)[1:-1]))
    return {
        "detect": [{"path": str(shim)}],
        "runtime": {"port": free_port(), "ready": {"timeout_s": 30}},
    }


@dataclass(frozen=True)
class Answer:
    """One request of the burst: when it was sent (wall clock), its status, who served it."""

    sent_at: float
    status: int
    served_by: str | None


@dataclass
class Burst:
    """``clients`` clients asking for M one request after another at A's Ollama door, until
    ``stop`` is set (or ``deadline_s`` passes). Runs in a thread on A's host (``_run_on``)."""

    door: str
    clients: int = CLIENTS
    deadline_s: float = 240.0
    stop: threading.Event = field(default_factory=threading.Event)
    answers: list[Answer] = field(default_factory=list)

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session, asyncio.TaskGroup() as group:
            for _ in range(self.clients):
                group.create_task(self._client(session))

    async def _client(self, session: aiohttp.ClientSession) -> None:
        ends = time.monotonic() + self.deadline_s
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": False}
        while not self.stop.is_set() and time.monotonic() < ends:
            sent_at = time.time()
            async with session.post(self.door + "/api/chat", json=body) as response:
                await response.read()
                served_by = response.headers.get(SERVED_BY_HEADER)
                self.answers.append(Answer(sent_at, response.status, served_by))

    def served_by(self, node: str, after: float = 0.0) -> list[Answer]:
        """The answers ``node`` served for requests sent after ``after``."""
        return [a for a in list(self.answers) if a.served_by == node and a.sent_at > after]


async def _with_burst(host: Host, burst: Burst) -> asyncio.Future[None]:
    """The burst started on ``host``'s loop in a thread; stop it with ``_end_burst``."""
    return asyncio.ensure_future(asyncio.to_thread(_run_on, host, burst.run))


async def _end_burst(burst: Burst, running: asyncio.Future[None]) -> None:
    burst.stop.set()
    async with asyncio.timeout(90):
        await running
    failed = [a for a in burst.answers if a.status != 200]
    assert not failed, failed[:5]


def _replica_jobs(jobs: list[JobRecord], path: str) -> list[JobRecord]:
    return [job for job in jobs if job.path == path and job.model == MODEL]


async def _jobs(client: Client) -> list[JobRecord]:
    return (await client.typed(methods.JOBS_GET_INITIAL, {"limit": 200})).jobs


async def _jobs_until(
    client: Client, check: Callable[[list[JobRecord]], bool], timeout: float
) -> list[JobRecord]:
    async with asyncio.timeout(timeout):
        while not check(jobs := await _jobs(client)):
            await asyncio.sleep(0.2)
    return jobs


def _loaded(models: Any) -> list[str]:
    return list(models.loaded_by_engine.get("ollama", []))


def _marks(models: Any) -> dict[str, Any]:
    return dict(models.replicas_by_engine.get("ollama", {}))


async def _chat_once(door: str) -> tuple[int, str | None]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": False}
    timeout = aiohttp.ClientTimeout(total=60)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(door + "/api/chat", json=body) as response,
    ):
        await response.read()
        return response.status, response.headers.get(SERVED_BY_HEADER)


async def _chat_at_once(a: Node, door: str, count: int) -> list[tuple[int, str | None]]:
    """``count`` requests for M sent at once to A's door, from A's host."""
    answers: list[tuple[int, str | None]] = []

    async def ask() -> None:
        async with asyncio.timeout(60 + SLACK_S):
            answers.extend(await asyncio.gather(*(_chat_once(door) for _ in range(count))))

    await asyncio.to_thread(_run_on, a.host, ask)
    return answers


async def _measure_load_on_b(a: Node, clients: tuple[Client, Client], door: str, b_id: str) -> None:
    """Rounds of ``CLIENTS`` requests at once at A's door while B is cold, until A's placement
    charges B's load: B, unmeasured, takes one from busy A and serves it cold (then M is
    unloaded there again), until a round that kept A busy sent B none."""
    ca, cb = clients
    served_cold = 0
    for round_ in range(WARM_UP_ROUNDS):
        await _until(ca, methods.DISCOVERY_GET_NODES, lambda n: _b_cold(n, b_id), SLACK_S)
        await _routes_by_now(a, ca, door, f"warm-up-{round_}")
        sent_at = time.time()
        answers = await _chat_at_once(a, door, CLIENTS)
        assert all(status == 200 for status, _ in answers), answers
        if any(by == b_id for _, by in answers):
            served_cold += 1
            await cb.call(
                methods.ENGINE_ACTION,
                {"engine": "ollama", "action": "unload_model", "model": MODEL},
                timeout=30,
            )
            await _until(cb, methods.ENGINE_MODELS, lambda m: MODEL not in _loaded(m))
        elif served_cold and _overlapped(await _round_jobs(ca, sent_at, CLIENTS)):
            return
    pytest.fail(f"B served {served_cold} of {WARM_UP_ROUNDS} rounds at busy A's door")


async def _routes_by_now(a: Node, ca: Client, door: str, probe: str) -> None:
    """Until A's proxy worker routes by a table built after this call (so it says of B what
    A's discovery says now): an alias set now is found at A's door only in such a table."""
    await ca.call(methods.MODELS_ALIAS_SET, {"name": probe, "target": MODEL})

    async def found() -> None:
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session, asyncio.timeout(SLACK_S):
            while True:
                async with session.get(f"{door}/v1/models/{probe}") as response:
                    await response.read()
                    if response.status == 200:
                        return
                await asyncio.sleep(0.1)

    await asyncio.to_thread(_run_on, a.host, found)
    await ca.call(methods.MODELS_ALIAS_REMOVE, {"name": probe})


async def _round_jobs(ca: Client, since: float, count: int) -> list[JobRecord]:
    """A's ``count`` jobs for M sent since ``since``, once all of them completed."""

    def done(jobs: list[JobRecord]) -> bool:
        found = [j for j in _replica_jobs(jobs, "/api/chat") if j.created_at >= since]
        return len(found) >= count and all(j.completed_at is not None for j in found)

    jobs = await _jobs_until(ca, done, SLACK_S)
    return [j for j in _replica_jobs(jobs, "/api/chat") if j.created_at >= since]


def _overlapped(jobs: list[JobRecord]) -> bool:
    """Whether every one of ``jobs`` arrived before the first of them completed (so each after
    the first was placed while A was busy)."""
    ends = [j.completed_at for j in jobs if j.completed_at is not None]
    return bool(ends) and max(j.created_at for j in jobs) < min(ends)


async def _cluster(
    nodes: tuple[Node, Node, Node], clients: list[Client]
) -> tuple[list[Any], list[str]]:
    """Start every engine, pair A with B and with C, and wait until each sees the others."""
    for client in clients:
        await client.call(methods.ENGINE_START, {"engine": "ollama"}, timeout=40)
    status = [await client.typed(methods.STATUS) for client in clients]
    ids = [s.node_id for s in status]
    ca = clients[0]
    for node, st, client in zip(nodes[1:], status[1:], clients[1:], strict=True):
        await _pair(ca, client, node.host.address, st.ports.node)
    for client, own in zip(clients, ids, strict=True):
        others = set(ids) - {own}
        await _until(
            client,
            methods.CLUSTER_STATUS,
            lambda s, others=others: others <= {m.node_id for m in s.members},
        )
    if nodes[0].host.namespace is None:  # no mDNS on loopback: A learns the others by address
        for node, st in zip(nodes[1:], status[1:], strict=True):
            await ca.call(methods.NODE_ADD, {"address": node.host.address, "port": st.ports.node})
    return status, ids


@pytest.mark.slow
@pytest.mark.timeout(360)
async def test_a_burst_loads_a_replica_on_an_idle_member_until_idle_past_its_ttl(
    hosts: list[Host],
    start_node: Callable[..., Node],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with monkeypatch.context() as knobs:  # A's broker only: its planner marks B's replica
        knobs.setenv(TTL_ENV, str(TTL_S))
        a = start_node(hosts[0], "a", MODEL, override=_engine(tmp_path, "a", MODEL, 0.2))
    b = start_node(hosts[1], "b", MODEL, override=_engine(tmp_path, "b", MODEL, B_LOAD_S))
    c = start_node(hosts[2], "c", OTHER, override=_engine(tmp_path, "c", OTHER, 0.2))
    async with _clients(a, b, c) as (ca, cb, cc):
        status, (a_id, b_id, _) = await _cluster((a, b, c), [ca, cb, cc])
        door = status[0].front_doors["ollama"]
        # M is the user's on A; the planner stays off until A has measured B's load time.
        await ca.call(
            methods.ENGINE_ACTION,
            {"engine": "ollama", "action": "load_model", "model": MODEL},
            timeout=30,
        )
        values = {
            "replicas_target_wait_s": 1,
            "replicas_ttl_s": SETTING_TTL_S,
            "replicas_mode": "off",
        }
        await ca.call(methods.SETTINGS_SET, {"values": values})

        await _measure_load_on_b(a, (ca, cb), door, b_id)

        await ca.call(methods.SETTINGS_SET, {"values": {"replicas_mode": "auto"}})
        replicas = await ca.typed(methods.REPLICAS_STATUS)
        assert (replicas.mode, replicas.active) == ("auto", True)
        assert (replicas.target_wait_s, replicas.ttl_s) == (1, TTL_S)

        burst = Burst(door)
        running = await _with_burst(a.host, burst)
        try:
            jobs = await _jobs_until(
                ca, lambda jobs: bool(_replica_jobs(jobs, "replica:load")), 60 + SLACK_S
            )
            answered_at_trigger = len(burst.answers)
            (load,) = _replica_jobs(jobs, "replica:load")
            assert load.target == b_id and load.engine == "ollama", load
            assert load.note is not None and f"{MODEL} waited " in load.note, load.note
            assert "(target 1 s)" in load.note or "(panic over 1 s target)" in load.note
            waited_on = f" on {status[0].node_name}"  # where the burst queued
            assert waited_on in load.note and load.note.endswith(
                f"; loading it on {status[1].node_name}"
            ), load.note

            on_b = await _until(
                cb,
                methods.ENGINE_MODELS,
                lambda m: MODEL in _loaded(m) and MODEL in _marks(m),
                timeout=B_LOAD_S + SLACK_S,
            )
            ready_at = time.time()
            mark = _marks(on_b)[MODEL]
            assert (mark.by, mark.ttl_s) == (a_id, TTL_S), mark
            assert await _jobs_until(
                ca,
                lambda jobs: _replica_jobs(jobs, "replica:load")[0].state == "completed",
                SLACK_S,
            )

            # The burst's later requests are served by the replica too.
            async with asyncio.timeout(SLACK_S):
                while len(burst.served_by(b_id, after=ready_at)) < 2:
                    await asyncio.sleep(0.2)
        finally:
            await _end_burst(burst, running)
        assert burst.served_by(a_id), "A served the start of the burst"
        last_on_b = max(answer.sent_at for answer in burst.served_by(b_id))

        # Idle past its TTL, B's planner unloads its replica; A's M (the user's) stays.
        def unloaded(jobs: list[JobRecord]) -> bool:
            done = _replica_jobs(jobs, "replica:unload")
            return bool(done) and done[0].state == "completed"

        b_jobs = await _jobs_until(cb, unloaded, TTL_S + PLANNER_PERIOD_S + SLACK_S)
        b_models, a_models = (
            await cb.typed(methods.ENGINE_MODELS),
            await ca.typed(methods.ENGINE_MODELS),
        )
        assert MODEL not in _loaded(b_models) and MODEL not in _marks(b_models)
        assert MODEL in _loaded(a_models) and MODEL not in _marks(a_models)
        (unload,) = _replica_jobs(b_jobs, "replica:unload")
        assert (unload.origin, unload.target) == (b_id, b_id), unload
        assert unload.note is not None and unload.note.startswith("idle for "), unload.note
        # Never before the TTL: its last use came no earlier than the last request B served.
        assert unload.created_at >= last_on_b + TTL_S - 0.5, (unload.created_at, last_on_b)
        mine = [job for job in await _jobs(ca) if job.origin == a_id]
        assert not _replica_jobs(mine, "replica:unload"), "A's planner unloads nothing"

        # Off: the same burst, longer than the first took to trigger (in answers, which a
        # loaded machine slows alike), loads nothing.
        await ca.call(methods.SETTINGS_SET, {"values": {"replicas_mode": "off"}})
        assert not (await ca.typed(methods.REPLICAS_STATUS)).active
        quiet = Burst(door)
        running = await _with_burst(a.host, quiet)
        try:
            async with asyncio.timeout(60 + SLACK_S):
                while len(quiet.answers) < answered_at_trigger + 3 * CLIENTS:
                    await asyncio.sleep(0.2)
        finally:
            await _end_burst(quiet, running)
        assert len(_replica_jobs(await _jobs(ca), "replica:load")) == 1
        assert MODEL not in _marks(await cb.typed(methods.ENGINE_MODELS))


def _b_cold(nodes: list[Any], b_id: str) -> bool:
    """Whether A's discovery lists B idle with M not loaded."""
    for node in nodes:
        if node.node_id == b_id and "ollama" in node.engines:
            loaded = node.engines["ollama"].loaded
            pending = node.telemetry.pending_jobs if node.telemetry is not None else None
            return loaded is not None and MODEL not in loaded and not pending
    return False
