"""Two real brokers on one computer, each managing its own (emulated) Ollama.

Node A knows node B as a manual node, on loopback. Until they are paired B is no routing
target (a model only B has is 404 at A's door). Once paired with a PIN, requests through A's
front door with the official ``ollama`` client are served by whichever node has the model, B's
over mutual TLS at B's relay port; both brokers keep the jobs. Then A's proxy worker is killed
with -9 in the middle of a burst, and B's engine stops the work A's dead worker had sent it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import ollama
import psutil
import pytest

from tests.integration.conftest import Broker, Client, free_port, pair_nodes, proxy_pid
from tests.integration.engines.conftest import OLLAMA_SHIM, write_override, write_script

LONG = {"num_predict": 400}  # 400 tokens at the emulator's 20 ms each: about 8 s


def _node_dir(tmp_path: Path, name: str, models: str) -> Path:
    """A data dir whose Ollama is the emulator with ``models`` installed."""
    data_dir = tmp_path / name
    shim_text = OLLAMA_SHIM.replace('"tinyllama:latest,qwen2:0.5b"', repr(models))
    shim = write_script(tmp_path / f"ollama-{name}", shim_text)
    write_override(
        data_dir,
        "ollama",
        {
            "detect": [{"path": str(shim)}],
            "runtime": {"port": free_port(), "ready": {"timeout_s": 30}},
        },
    )
    return data_dir


async def _until(
    client: Client, method: str, params: Any, check: Callable[[Any], bool], timeout: float = 20.0
) -> Any:
    async with asyncio.timeout(timeout):
        while True:
            answer = await client.call(method, params)
            if check(answer):
                return answer
            await asyncio.sleep(0.1)


def _jobs(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    return list(snapshot["workloads"])


# Calls the jobs methods by their former names (``workloads:get-initial``, ``workloads:subscribe``
# and the ``workloads:event`` pushes): the one test that checks older clients are still answered.
async def test_two_nodes_route_keep_jobs_and_survive_a_killed_proxy_worker(
    start_broker: Callable[..., Broker], tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("PAIR_DISCOVERY_MDNS", "0")
    monkeypatch.setenv("PAIR_PROXY_RETRY_BACKOFF_S", "0.05,0.1")
    node_b = start_broker(data_dir=_node_dir(tmp_path, "b", "shared:latest,only-b:latest"))
    node_a = start_broker(data_dir=_node_dir(tmp_path, "a", "shared:latest"))
    async with node_a.connect() as a, node_b.connect() as b:
        for client in (a, b):
            await client.call("engine:start", {"engine": "ollama"}, timeout=40)
        b_status = await b.call("status")
        await a.call("node/add", {"address": "127.0.0.1", "port": b_status["ports"]["node"]})
        b_id = b_status["node_id"]
        a_status = await a.call("status")
        a_id = a_status["node_id"]

        # A stranger's node-info names no models: B's arrive only over its pinned TLS, once paired.
        def knows_b(nodes: list[dict[str, Any]]) -> bool:
            return any(n["node_id"] == b_id and n.get("reachable") for n in nodes)

        await _until(a, "discovery:get-nodes", None, knows_b)
        door = a_status["front_doors"]["ollama"]
        assert door.startswith("http://127.0.0.1:")
        clients = ollama.AsyncClient(host=door)

        # Not paired: B is discovered on loopback but is no target. Its model is unknown here,
        # and the federated list holds A's models only.
        await asyncio.sleep(0.5)  # the table is sent every 0.1 s
        with pytest.raises(ollama.ResponseError) as refused:
            await clients.chat(model="only-b", messages=[{"role": "user", "content": "hi"}])
        assert refused.value.status_code == 404
        assert sorted(m.model or "" for m in (await clients.list()).models) == ["shared:latest"]

        await pair_nodes(a, b, b_status["ports"]["node"])

        # A model only B has: A routes it to B's relay port. Both brokers keep the job.
        answer = await _chat_when_routable(clients, "only-b")
        assert answer.done and answer.message.content
        job = (
            await _until(
                a,
                "workloads:get-initial",
                {"limit": 10},
                lambda s: any(j["state"] == "completed" for j in _jobs(s)),
            )
        )["workloads"][0]
        assert (job["origin"], job["serving"], job["model"]) == (a_id, b_id, "only-b")
        served = await _until(b, "workloads:get-initial", {"limit": 10}, lambda s: bool(_jobs(s)))
        assert _jobs(served)[0]["origin"] == a_id
        assert _jobs(served)[0]["key"].startswith(job["key"])
        # It went over A's worker's kept-alive connection to B's relay port, not to B's doors.
        remote = _remote_ports(proxy_pid(await a.call("status")))
        assert b_status["ports"]["relay"] in remote
        assert b_status["ports"]["ollama"] not in remote

        # Federated model list: A's /api/tags lists B's models too, each once.
        listed = await clients.list()
        names = sorted(m.model or "" for m in listed.models)
        assert names == ["only-b:latest", "shared:latest"]
        # And /api/ps: B's loaded model (the chat above loaded it on B) is listed at A.
        loaded = await clients.ps()
        assert "only-b:latest" in [m.model for m in loaded.models]

        await _kill_proxy_mid_burst(a, b, door, node_b)


def _remote_ports(pid: int | None) -> set[int]:
    """The remote ports of the TCP connections process ``pid`` holds open."""
    assert pid is not None
    return {c.raddr.port for c in psutil.Process(pid).net_connections("tcp") if c.raddr}


async def _chat_when_routable(client: ollama.AsyncClient, model: str) -> ollama.ChatResponse:
    """Chat once the routing table has caught up with discovery (it is sent every 0.1 s)."""
    async with asyncio.timeout(10):
        while True:
            try:
                return await client.chat(model=model, messages=[{"role": "user", "content": "hi"}])
            except ollama.ResponseError as exc:
                if exc.status_code != 404:
                    raise
            await asyncio.sleep(0.1)


async def _kill_proxy_mid_burst(a: Client, b: Client, door: str, node_b: Broker) -> None:
    await a.call("workloads:subscribe")
    pushes_before = len(a.pushes)
    burst = [
        asyncio.create_task(_stream(door, f"burst {n}")) for n in range(4)
    ]  # spread over A's engine and B's by reservations
    running = await _until(
        a,
        "workloads:get-initial",
        {"limit": 20},
        lambda s: sum(j["state"] == "running" for j in _jobs(s)) >= 2,
    )
    held = [j["key"] for j in _jobs(running) if j["state"] in ("running", "in_flight")]
    old_pid = proxy_pid(await a.call("status"))
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)
    killed_at = time.monotonic()

    # A client that connects while the worker is down waits in the kept socket's backlog.
    async with aiohttp.ClientSession() as session, session.get(door + "/api/version") as during:
        assert during.status == 200
    status = await _until(
        a, "status", None, lambda s: proxy_pid(s) not in (None, old_pid), timeout=10
    )
    back_after = time.monotonic() - killed_at
    print(f"proxy worker back {back_after:.2f} s after kill -9 (pid {proxy_pid(status)})")

    # An answer that was streaming is cut; a request still waiting in A's scheduler was held
    # with A's broker and is served by the new worker, whole.
    outcomes = await asyncio.gather(*burst, return_exceptions=True)
    cut = [outcome for outcome in outcomes if isinstance(outcome, Exception)]
    assert cut, "the kill cut no streaming answer"
    assert all(isinstance(o, Exception) or o > 1 for o in outcomes)
    failed = 0
    for key in held:  # the jobs the dead worker held end, none stays Running forever
        ended = await a.wait_push(
            "workloads:event",
            lambda e, key=key: (
                e["key"] == key and e["workload"]["state"] in ("failed", "completed")
            ),
            since=pushes_before,
        )
        if ended["workload"]["state"] == "failed":
            failed += 1
            assert "proxy worker stopped" in ended["workload"]["error"]
    assert failed == len(cut), "a cut answer without its failed job, or a served one failed"
    # B lists each of A's jobs once, as A's own record (its copies are folded in) ...
    served = await _until(
        b,
        "workloads:get-initial",
        {"limit": 20},
        lambda s: all(j["state"] in ("cancelled", "completed", "failed") for j in _jobs(s)),
    )
    assert not [j["key"] for j in _jobs(served) if "@" in j["key"]]
    # ... and B's engine stopped the work it was doing for A's dead worker: its own copies
    # (kept in its pair.db for its load) ended cancelled.
    async with asyncio.timeout(10):
        while True:
            copies = _served_copies(node_b.data_dir / "pair.db")
            if copies and all(state != "running" and state != "in_flight" for state in copies):
                break
            await asyncio.sleep(0.2)
    assert "cancelled" in copies


def _served_copies(database: Path) -> list[str]:
    """The states of the jobs a node served for another one, read from its ``pair.db``."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        return [row[0] for row in db.execute("SELECT state FROM jobs WHERE key LIKE '%@%'")]


async def _stream(door: str, prompt: str) -> int:
    client = ollama.AsyncClient(host=door)
    chunks = 0
    async for _ in await client.chat(
        model="shared",
        messages=[{"role": "user", "content": prompt}],
        stream=True,
        options=LONG,
    ):
        chunks += 1
    return chunks
