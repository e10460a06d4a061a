"""The front door's routing rules under injected network faults, door → fault proxy → engine.

A real proxy worker routes to scripted engines; the engine it tries first sits behind the
tests' TCP fault proxy (``tests/support/faultproxy.py``), which drops, resets, stalls or
black-holes its connections. Each test checks what the client got, which engine served, and
how the job ended.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import openai
import pytest

from backend.protocol.proxy import ProxyTargets, RouteTarget
from tests.integration.proxy.conftest import LOCAL_NODE, RunningProxy, StartProxy
from tests.integration.proxy.scripted import ScriptedEngine, start_engine
from tests.support.faultproxy import Fault, FaultProxy, http_response

# Short per-attempt bounds (a silent upstream costs seconds, not the default two minutes),
# still long enough for a healthy engine on a loaded machine.
HEADER_TIMEOUT_S = 2.0
CONTENT_TIMEOUT_S = 2.0
# Where nothing ever answers: each of the five dispatches gives up after this.
DEADLINE_S = 0.3
# What llama-server answers when every slot is taken.
NO_SLOT = http_response(
    503,
    "Service Unavailable",
    b'{"error":{"code":503,"message":"no slot available","type":"unavailable_error"}}',
)


@dataclass
class Rig:
    """Engines and fault proxies a test started; all stopped at teardown."""

    engines: list[ScriptedEngine] = field(default_factory=list)
    faults: list[FaultProxy] = field(default_factory=list)

    async def engine(self, name: str, **options: Any) -> ScriptedEngine:
        engine = await start_engine(ScriptedEngine(name, **options))
        self.engines.append(engine)
        return engine

    async def fault(self, url: str) -> FaultProxy:
        proxy = await FaultProxy.to_url(url).start()
        self.faults.append(proxy)
        return proxy

    async def stop(self) -> None:
        for proxy in self.faults:
            await proxy.aclose()
        for engine in self.engines:
            if engine.server is not None:
                await engine.server.stop()


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    started = Rig()
    yield started
    await started.stop()


@dataclass
class Answer:
    """What the client read: the status, the body's lines, and whether the transfer was cut."""

    status: int
    lines: list[bytes]
    cut: bool

    def records(self) -> list[dict[str, Any]]:
        """The lines that are whole JSON records (a line cut in the middle is not)."""
        found = []
        for line in self.lines:
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
        return found


async def chat(proxy: RunningProxy, tag: str, *, timeout: float = 20.0) -> Answer:
    """A streamed Ollama chat through the door, read line by line; never hangs the test."""
    lines: list[bytes] = []
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
        session.post(
            proxy.url("ollama") + "/api/chat",
            json={"model": "m", "messages": [], "stream": True, "tag": tag},
        ) as response,
    ):
        try:
            async for line in response.content:
                if line.strip():
                    lines.append(line.strip())
        except aiohttp.ClientPayloadError:
            return Answer(response.status, lines, cut=True)
        return Answer(response.status, lines, cut=False)


def local(url: str) -> RouteTarget:
    return RouteTarget(node_id=LOCAL_NODE, kind="local", base_url=url, models=["m"])


def other(node: str, url: str) -> RouteTarget:
    return RouteTarget(node_id=node, kind="engine", base_url=url, models=["m"])


def table(
    *targets: RouteTarget, door_engine: str = "ollama", header_timeout_s: float = HEADER_TIMEOUT_S
) -> ProxyTargets:
    return ProxyTargets(
        node_id=LOCAL_NODE,
        engines={door_engine: list(targets)},
        header_timeout_s=header_timeout_s,
        first_content_timeout_s=CONTENT_TIMEOUT_S,
    )


async def routed(start_proxy: StartProxy, targets: ProxyTargets) -> RunningProxy:
    proxy = await start_proxy()
    proxy.targets = targets
    await proxy.wait_table()
    return proxy


def kinds(proxy: RunningProxy, key: str) -> list[tuple[str, int, str | None]]:
    return [(e["kind"], e["attempt"], e.get("target") or e.get("node")) for e in proxy.events(key)]


async def finished(proxy: RunningProxy, key: str) -> dict[str, Any]:
    return await proxy.wait_job(lambda e: e["key"] == key and e["kind"] in ("completed", "errored"))


BEFORE_THE_FIRST_BYTE = [
    pytest.param(Fault.drop(), id="drop"),
    pytest.param(Fault.reset(), id="reset"),
    pytest.param(Fault.blackhole(), id="blackhole"),
    pytest.param(Fault.stall(), id="stall-with-the-request"),
]


@pytest.mark.parametrize("fault", BEFORE_THE_FIRST_BYTE)
async def test_a_fault_before_the_first_byte_fails_over_to_the_next_engine(
    start_proxy: StartProxy, rig: Rig, fault: Fault
) -> None:
    engine_a = await rig.engine("a")
    engine_b = await rig.engine("b")
    broken = await rig.fault(engine_a.url)
    broken.set_fault(fault)
    proxy = await routed(start_proxy, table(local(broken.url()), other("engine-b", engine_b.url)))

    answer = await chat(proxy, "t1")

    assert (answer.status, answer.cut) == (200, False)
    assert [r["message"]["content"] for r in answer.records()] == ["b:t1 "] * 4
    assert answer.records()[-1]["done"] is True
    assert engine_b.received == ["t1"] and broken.accepted >= 1
    # Only a stall let the request through to engine A; its answer never came back.
    assert engine_a.received == (["t1"] if fault.action == "stall" else [])
    key = (await proxy.wait_keys(1))[0]
    await finished(proxy, key)
    # Attempt 1 may read Running for a moment: its headers did leave on an accepted connection.
    assert [k for k in kinds(proxy, key) if k != ("started", 1, LOCAL_NODE)] == [
        ("submitted", 1, LOCAL_NODE),
        ("submitted", 2, "engine-b"),
        ("started", 2, "engine-b"),
        ("completed", 2, None),
    ]


AFTER_THE_FIRST_BYTE = [
    pytest.param("reset", "the engine's response broke off", id="reset"),
    pytest.param("stall", f"the engine sent nothing for {CONTENT_TIMEOUT_S:g} s", id="stall"),
]


@pytest.mark.parametrize(("action", "reason"), AFTER_THE_FIRST_BYTE)
async def test_a_fault_after_the_first_byte_ends_the_stream_with_an_error_and_no_retry(
    start_proxy: StartProxy, rig: Rig, action: str, reason: str
) -> None:
    engine_a = await rig.engine("a", tokens=20)
    engine_b = await rig.engine("b")
    broken = await rig.fault(engine_a.url)
    proxy = await routed(start_proxy, table(local(broken.url()), other("engine-b", engine_b.url)))
    whole = await chat(proxy, "whole")  # how many bytes a whole answer takes on a new link
    assert whole.records()[-1]["done"] is True
    size = broken.links[0].sent_down
    broken.set_fault(
        Fault.reset(after_bytes=size // 2)
        if action == "reset"
        else Fault.stall(after_bytes=size // 2)
    )
    broken.sever()

    answer = await chat(proxy, "t1")

    assert answer.status == 200  # committed: the first lines were A's
    records = answer.records()
    assert records[0]["message"]["content"] == "a:t1 "
    assert not any(r.get("done") for r in records)
    assert reason in records[-1]["error"]  # in-band, in Ollama's shape, as the last line
    assert answer.cut  # and the transfer itself says it is incomplete
    assert engine_b.received == []  # never retried elsewhere: no token twice
    key = (await proxy.wait_keys(2))[1]
    ended = await finished(proxy, key)
    assert ended["kind"] == "errored" and not ended.get("cancelled", False)
    assert reason in ended["error"]
    assert [k for k, *_ in kinds(proxy, key)].count("submitted") == 1  # one dispatch only


@pytest.mark.parametrize(
    ("door", "path", "engine"),
    [
        pytest.param("ollama", "/api/chat", "ollama", id="ollama"),
        pytest.param("openai", "/v1/chat/completions", "lmstudio", id="openai"),
    ],
)
async def test_a_black_holed_engine_is_given_up_on_within_the_budget_with_a_clear_error(
    start_proxy: StartProxy, rig: Rig, door: str, path: str, engine: str
) -> None:
    engine_a = await rig.engine("a")
    hole = await rig.fault(engine_a.url)
    hole.set_fault(Fault.blackhole())
    targets = table(local(hole.url()), door_engine=engine, header_timeout_s=DEADLINE_S)
    proxy = await routed(start_proxy, targets)

    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        session.post(proxy.url(door) + path, json={"model": "m", "messages": []}) as response,
    ):
        status, body = response.status, await response.json()

    message = f"no response headers within {DEADLINE_S:g} s"
    assert status == 502
    text = body["error"] if door == "ollama" else body["error"]["message"]
    assert message in text
    assert hole.accepted == 5 and engine_a.received == []  # the whole dispatch budget, no more
    ended = await finished(proxy, (await proxy.wait_keys(1))[0])
    assert ended["kind"] == "errored" and message in ended["error"]


async def test_a_busy_engine_is_passed_over_and_busy_everywhere_is_reported_busy(
    start_proxy: StartProxy, rig: Rig
) -> None:
    engine_a = await rig.engine("a")
    engine_b = await rig.engine("b")
    busy_a = await rig.fault(engine_a.url)
    busy_a.set_fault(Fault.respond(NO_SLOT))
    front_b = await rig.fault(engine_b.url)
    proxy = await routed(start_proxy, table(local(busy_a.url()), other("engine-b", front_b.url())))

    served = await chat(proxy, "t1")
    assert served.status == 200 and served.records()[-1]["done"] is True
    assert engine_b.received == ["t1"] and engine_a.received == []

    front_b.set_fault(Fault.respond(NO_SLOT))
    front_b.sever()
    refused = await chat(proxy, "t2")
    # Every owner said busy for the whole budget: the last answer goes back as it was.
    assert refused.status == 503
    assert json.loads(refused.lines[0])["error"]["message"] == "no slot available"
    assert busy_a.accepted + front_b.accepted == 1 + 5 + 1  # t1: A, B; t2: five dispatches
    jobs = len(await proxy.wait_keys(2))  # t1 and t2
    asked = (busy_a.accepted, front_b.accepted)

    held = await chat(proxy, "t3")
    # Both just said busy: answered at once, no job, no engine asked.
    assert held.status == 503 and "busy" in json.loads(held.lines[0])["error"]
    await asyncio.sleep(0.1)  # longer than a batch of job events waits
    assert len(proxy.keys()) == jobs and (busy_a.accepted, front_b.accepted) == asked


async def test_an_openai_stream_cut_after_the_first_byte_ends_with_an_error_event(
    start_proxy: StartProxy, rig: Rig, ollama_emulator: str
) -> None:
    """The official ``openai`` client reads the door's last SSE event and raises its message."""
    broken = await rig.fault(ollama_emulator)
    engine = RouteTarget(
        node_id=LOCAL_NODE, kind="local", base_url=broken.url(), models=["llama3.2"]
    )
    proxy = await routed(start_proxy, table(engine, door_engine="lmstudio"))
    client = openai.AsyncOpenAI(base_url=proxy.url("openai") + "/v1", api_key="unused")

    async def ask() -> list[str]:
        stream = await client.chat.completions.create(
            model="llama3.2",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            max_tokens=40,
        )
        return [
            c.choices[0].delta.content or "" for c in [chunk async for chunk in stream] if c.choices
        ]

    assert len(await ask()) > 10  # a whole answer, to measure
    # Cut between two events (an event cut in half would garble the one after it).
    half = broken.links[0].sent_down // 2
    broken.set_fault(Fault.reset(after_bytes=half, boundary=b"\n\n"))
    broken.sever()

    with pytest.raises(openai.APIError) as cut:
        await ask()

    assert "the engine's response broke off" in cut.value.message
    await client.close()
    ended = await finished(proxy, (await proxy.wait_keys(2))[1])
    assert ended["kind"] == "errored" and "broke off" in ended["error"]
