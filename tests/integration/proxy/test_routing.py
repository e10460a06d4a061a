"""Routing across nodes on loopback: two or three real proxy workers, scripted engines.

Node A's table lists its own engine and node B as a peer (B's relay listener, mutual TLS with
each side pinning the other's certificate). Each test breaks something on purpose and checks
what the client, the engines and the job events saw.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.proxy.service import WRITE_DEADLINE_ENV
from tests.integration.proxy.conftest import (
    LOCAL_NODE,
    RunningProxy,
    StartProxy,
    credentials_for,
)
from tests.integration.proxy.scripted import ScriptedEngine, start_engine
from tests.support.ports import refusing_port

NODE_B = "node-b"


@pytest.fixture
async def engines() -> AsyncIterator[list[ScriptedEngine]]:
    started: list[ScriptedEngine] = []
    yield started
    for engine in started:
        if engine.server is not None:
            await engine.server.stop()


async def _engine(started: list[ScriptedEngine], name: str, **options: Any) -> ScriptedEngine:
    engine = await start_engine(ScriptedEngine(name, **options))
    started.append(engine)
    return engine


def _local(url: str, *, slots: int = 1) -> RouteTarget:
    return RouteTarget(node_id=LOCAL_NODE, kind="local", base_url=url, models=["m"], slots=slots)


def _table(node: str, *targets: RouteTarget, **options: Any) -> ProxyTargets:
    return ProxyTargets(node_id=node, engines={"ollama": list(targets)}, **options)


async def _node_b(
    start_proxy: StartProxy, engine: ScriptedEngine, *, slots: int = 1
) -> RouteTarget:
    """Start node B serving ``engine`` and trusting node A; the peer target A uses to reach B."""
    b = await start_proxy(node_id=NODE_B)
    b.targets = _table(
        NODE_B,
        RouteTarget(node_id=NODE_B, kind="local", base_url=engine.url, models=["m"], slots=slots),
        trusted=[credentials_for(LOCAL_NODE).cert_der],
    )
    _NODES[NODE_B] = b
    await b.wait_table()
    return b.as_peer(NODE_B, ["m"])


_NODES: dict[str, RunningProxy] = {}


async def _chat(
    proxy: RunningProxy, tag: str, *, stream: bool = True, timeout: float = 20.0
) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            proxy.url("ollama") + "/api/chat",
            json={"model": "m", "messages": [], "stream": stream, "tag": tag},
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response,
    ):
        return response.status, await response.read()


async def _settle(proxy: RunningProxy) -> None:
    await proxy.wait_table()


def _kinds(proxy: RunningProxy, key: str) -> list[tuple[str, int, str | None]]:
    return [(e["kind"], e["attempt"], e.get("target") or e.get("node")) for e in proxy.events(key)]


async def test_failover_when_this_nodes_engine_is_dead_before_the_first_byte(
    start_proxy: StartProxy, engines: list[ScriptedEngine]
) -> None:
    engine_b = await _engine(engines, "b")
    peer = await _node_b(start_proxy, engine_b)
    a = await start_proxy()
    with refusing_port() as dead:
        a.targets = _table(LOCAL_NODE, _local(f"http://127.0.0.1:{dead}"), peer)
        await _settle(a)

        status, body = await _chat(a, "t1")

    assert status == 200
    lines = [json.loads(line) for line in body.splitlines()]
    assert lines[-1]["done"] is True and "b:t1" in lines[0]["message"]["content"]
    key = (await a.wait_keys(1))[0]
    await a.wait_job(lambda e: e["key"] == key and e["kind"] == "completed")
    assert _kinds(a, key) == [
        ("submitted", 1, LOCAL_NODE),
        ("submitted", 2, NODE_B),
        ("started", 2, NODE_B),
        ("completed", 2, None),
    ]
    # Node B kept the job it served for A, under A's key and origin.
    b = _NODES[NODE_B]
    served = await b.wait_job(lambda e: e["key"] == f"{key}@2" and e["kind"] == "completed")
    assert served["origin"] == LOCAL_NODE and served["attempt"] == 2


async def test_no_retry_after_the_commit_and_a_cut_stream_is_failed(
    start_proxy: StartProxy, engines: list[ScriptedEngine]
) -> None:
    cutting = await _engine(engines, "a", behaviour="cut", tokens=2)
    engine_b = await _engine(engines, "b")
    peer = await _node_b(start_proxy, engine_b)
    a = await start_proxy()
    a.targets = _table(LOCAL_NODE, _local(cutting.url), peer)
    await _settle(a)

    with pytest.raises(aiohttp.ClientPayloadError):
        await _chat(a, "t1")

    key = (await a.wait_keys(1))[0]
    ended = await a.wait_job(lambda e: e["key"] == key and e["kind"] == "errored")
    assert ended.get("cancelled", False) is False
    assert cutting.received == ["t1"] and engine_b.received == []
    assert [k for k, *_ in _kinds(a, key)].count("submitted") == 1  # one dispatch only


async def test_a_burst_is_spread_by_reservations(
    start_proxy: StartProxy, engines: list[ScriptedEngine]
) -> None:
    first = await _engine(engines, "e1", token_delay=0.05, tokens=4)
    second = await _engine(engines, "e2", token_delay=0.05, tokens=4)
    a = await start_proxy()
    a.targets = _table(
        LOCAL_NODE,
        RouteTarget(node_id="e1", kind="engine", base_url=first.url, models=["m"]),
        RouteTarget(node_id="e2", kind="engine", base_url=second.url, models=["m"]),
    )
    await _settle(a)

    results = await asyncio.gather(*(_chat(a, f"t{i}") for i in range(10)))

    assert all(status == 200 for status, _ in results)
    # Both were idle by the last snapshot; without reservations all ten pile on e1.
    assert len(first.received) == 5 and len(second.received) == 5


async def test_the_next_turn_of_a_chat_goes_back_to_the_node_that_served_it(
    start_proxy: StartProxy, engines: list[ScriptedEngine]
) -> None:
    """Affinity is a credit in placement: two idle owners, and the chat's node wins the tie."""
    first = await _engine(engines, "e1", token_delay=0.1, tokens=3)
    second = await _engine(engines, "e2", token_delay=0.1, tokens=3)
    a = await start_proxy()
    a.targets = _table(
        LOCAL_NODE,
        RouteTarget(node_id="e1", kind="engine", base_url=first.url, models=["m"]),
        RouteTarget(node_id="e2", kind="engine", base_url=second.url, models=["m"]),
    )
    await _settle(a)

    async def turn(chat: str, tag: str, *replies: str) -> int:
        messages: list[dict[str, str]] = [{"role": "user", "content": f"chat {chat} opens"}]
        for reply in replies:
            messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "?"}]
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                a.url("ollama") + "/api/chat",
                json={"model": "m", "messages": messages, "stream": True, "tag": tag},
            ) as response,
        ):
            await response.read()
            return response.status

    x1 = asyncio.create_task(turn("x", "x1"))
    await a.wait_job(lambda e: e["kind"] == "started")
    y1 = asyncio.create_task(turn("y", "y1"))  # e1 is busy with x: y goes to e2
    assert await asyncio.gather(x1, y1) == [200, 200]
    assert (first.received, second.received) == (["x1"], ["y1"])
    # Both idle again: a tie, which plain ordering would give to e1.
    assert await turn("y", "y2", "fine") == 200
    assert await turn("x", "x2", "fine") == 200
    assert (first.received, second.received) == (["x1", "x2"], ["y1", "y2"])


async def test_one_slot_two_requests_read_in_flight_then_running(
    start_proxy: StartProxy, engines: list[ScriptedEngine]
) -> None:
    engine = await _engine(engines, "a", token_delay=0.15, tokens=2)
    a = await start_proxy()
    a.targets = _table(LOCAL_NODE, _local(engine.url, slots=1))
    await _settle(a)

    first = asyncio.create_task(_chat(a, "t1", stream=False))
    await a.wait_job(lambda e: e["kind"] == "started")
    second = asyncio.create_task(_chat(a, "t2", stream=False))
    await asyncio.gather(first, second)

    key_1, key_2 = await a.wait_keys(2)
    for key in (key_1, key_2):
        await a.wait_job(lambda e, key=key: e["key"] == key and e["kind"] == "completed")
    order = [(e["key"], e["kind"]) for e in a.jobs if e["kind"] in ("started", "completed")]
    # The second waited in this node's scheduler for the one slot: In flight, then Running.
    assert engine.received == ["t1", "t2"]
    assert order.index((key_2, "started")) > order.index((key_1, "completed"))
    started_2 = next(e for e in a.events(key_2) if e["kind"] == "started")
    completed_2 = next(e for e in a.events(key_2) if e["kind"] == "completed")
    assert started_2["at"] < completed_2["at"]  # Running before its (only) output


async def test_a_remote_job_reads_running_before_its_output(
    start_proxy: StartProxy, engines: list[ScriptedEngine]
) -> None:
    engine_b = await _engine(engines, "b", token_delay=0.2, tokens=2)
    peer = await _node_b(start_proxy, engine_b)
    a = await start_proxy()
    a.targets = _table(LOCAL_NODE, peer)
    await _settle(a)

    task = asyncio.create_task(_chat(a, "t1", stream=False))
    started = await a.wait_job(lambda e: e["kind"] == "started")
    assert started["node"] == NODE_B
    assert not task.done()  # Running while node B's engine still works on it
    status, _ = await task
    assert status == 200


async def test_a_target_that_leaves_the_table_is_abandoned_and_its_engine_stops(
    start_proxy: StartProxy, engines: list[ScriptedEngine]
) -> None:
    hanging = await _engine(engines, "b", behaviour="hang")
    healthy = await _engine(engines, "c")
    peer = await _node_b(start_proxy, hanging)
    other = RouteTarget(node_id="node-c", kind="engine", base_url=healthy.url, models=["m"])
    a = await start_proxy()
    a.targets = _table(LOCAL_NODE, peer, other, pins={"ollama": NODE_B})
    await _settle(a)

    task = asyncio.create_task(_chat(a, "t1"))
    await a.wait_job(lambda e: e["kind"] == "submitted" and e.get("target") == NODE_B)
    await asyncio.sleep(0.2)
    left_at = time.time()
    a.targets = _table(LOCAL_NODE, other)
    moved = await a.wait_job(lambda e: e["kind"] == "submitted" and e.get("target") == "node-c")
    status, _ = await task

    assert status == 200 and healthy.received == ["t1"]
    print(f"abandoned {1000 * (moved['at'] - left_at):.0f} ms after the node left the table")
    assert moved["at"] - left_at < 2.0  # not the 120 s header timeout
    for _ in range(100):  # node B's engine saw the request go away
        if hanging.cancelled:
            break
        await asyncio.sleep(0.02)
    assert hanging.cancelled == ["t1"]


async def test_when_every_owner_is_busy_new_requests_get_503_without_a_job(
    start_proxy: StartProxy, engines: list[ScriptedEngine]
) -> None:
    busy = await _engine(engines, "a", behaviour="busy")
    a = await start_proxy()
    a.targets = _table(LOCAL_NODE, _local(busy.url))
    await _settle(a)

    status, body = await _chat(a, "t1")
    assert status == 503 and json.loads(body) == {"error": "server busy"}  # passed through
    assert len(busy.received) == 5  # the whole dispatch budget
    jobs_before = len(a.keys())

    async with (
        aiohttp.ClientSession() as session,
        session.post(a.url("ollama") + "/api/chat", json={"model": "m"}) as held,
    ):
        assert held.status == 503
        assert int(held.headers["Retry-After"]) >= 1
        assert "busy" in (await held.json())["error"]
    assert len(busy.received) == 5 and len(a.keys()) == jobs_before


async def test_headers_that_never_come_time_out_with_a_clear_502(
    start_proxy: StartProxy, engines: list[ScriptedEngine]
) -> None:
    hanging = await _engine(engines, "a", behaviour="hang")
    a = await start_proxy()
    a.targets = _table(LOCAL_NODE, _local(hanging.url), header_timeout_s=0.2)
    await _settle(a)

    status, body = await _chat(a, "t1")

    assert status == 502 and "no response headers within 0.2 s" in json.loads(body)["error"]
    assert len(hanging.received) == 5


async def test_headers_without_content_time_out_and_fail_over_to_a_node_that_answers(
    start_proxy: StartProxy, engines: list[ScriptedEngine]
) -> None:
    silent = await _engine(engines, "a", behaviour="silent")
    healthy = await _engine(engines, "c")
    other = RouteTarget(node_id="node-c", kind="engine", base_url=healthy.url, models=["m"])
    a = await start_proxy()
    a.targets = _table(LOCAL_NODE, _local(silent.url), other, first_content_timeout_s=0.3)
    await _settle(a)

    status, body = await _chat(a, "t1")

    assert status == 200 and b"c:t1" in body  # headers alone did not commit
    assert silent.received == ["t1"] and silent.cancelled == ["t1"]
    a.targets = _table(LOCAL_NODE, _local(silent.url), first_content_timeout_s=0.3)
    await _settle(a)
    status, body = await _chat(a, "t2")
    assert status == 504 and "no content within 0.3 s" in json.loads(body)["error"]


async def test_a_client_that_leaves_mid_stream_cancels_the_remote_engines_work(
    start_proxy: StartProxy, engines: list[ScriptedEngine]
) -> None:
    slow = await _engine(engines, "b", token_delay=0.2, tokens=50)
    peer = await _node_b(start_proxy, slow)
    a = await start_proxy()
    a.targets = _table(LOCAL_NODE, peer)
    await _settle(a)

    async with aiohttp.ClientSession() as session:
        response = await session.post(
            a.url("ollama") + "/api/chat", json={"model": "m", "tag": "t1"}
        )
        await response.content.readline()
        response.close()

    key = (await a.wait_keys(1))[0]
    ended = await a.wait_job(lambda e: e["key"] == key and e["kind"] == "errored")
    assert ended["cancelled"] is True
    b = _NODES[NODE_B]
    served = await b.wait_job(lambda e: e["key"] == f"{key}@1" and e["kind"] == "errored")
    assert served["cancelled"] is True
    for _ in range(100):
        if slow.cancelled:
            break
        await asyncio.sleep(0.02)
    assert slow.cancelled == ["t1"] and slow.finished == []


async def test_a_client_that_stops_reading_is_cut_after_the_write_deadline(
    start_proxy: StartProxy, engines: list[ScriptedEngine]
) -> None:
    flood = await _engine(engines, "a", behaviour="flood")
    a = await start_proxy(environment={WRITE_DEADLINE_ENV: "0.5"})
    a.targets = _table(LOCAL_NODE, _local(flood.url))
    await _settle(a)
    port = int(a.url("ollama").rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"model": "m", "tag": "t1"}).encode()
    writer.write(
        b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    await writer.drain()
    try:  # never read: the proxy's writes back up until the deadline cuts us off
        ended = await a.wait_job(lambda e: e["kind"] == "errored", timeout=30)
    finally:
        writer.close()
    assert ended["cancelled"] is True and "stopped reading" in ended["error"]
    for _ in range(100):
        if flood.cancelled:
            break
        await asyncio.sleep(0.05)
    assert flood.cancelled == ["t1"]  # the engine stopped producing for nobody
    del reader
