"""The routing rules under injected faults between two nodes: A's door → fault proxy → B's relay.

Node B is a real proxy worker serving a scripted engine on its relay port (mutual TLS, each
side pinning the other); node A's table lists B as a peer whose address is the fault proxy's
(TLS passes through it byte for byte), and an engine C to fail over to.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from backend.protocol.proxy import ProxyTargets, RouteTarget
from tests.integration.proxy.conftest import (
    LOCAL_NODE,
    RunningProxy,
    StartProxy,
    credentials_for,
)
from tests.integration.proxy.test_faults import (
    BEFORE_THE_FIRST_BYTE,
    CONTENT_TIMEOUT_S,
    DEADLINE_S,
    HEADER_TIMEOUT_S,
    Rig,
    chat,
    finished,
    kinds,
    other,
)
from tests.support.faultproxy import Action, Fault, FaultProxy

NODE_B = "node-b"


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    started = Rig()
    yield started
    await started.stop()


async def _node_b(
    start_proxy: StartProxy, rig: Rig, **engine: Any
) -> tuple[RunningProxy, FaultProxy]:
    """Node B serving a scripted engine and trusting A; the fault proxy in front of its relay."""
    served = await rig.engine("b", **engine)
    b = await start_proxy(node_id=NODE_B)
    b.targets = ProxyTargets(
        node_id=NODE_B,
        engines={
            "ollama": [RouteTarget(node_id=NODE_B, kind="local", base_url=served.url, models=["m"])]
        },
        trusted=[credentials_for(LOCAL_NODE).cert_der],
        first_content_timeout_s=CONTENT_TIMEOUT_S,
    )
    await b.wait_table()
    return b, await rig.fault(b.relay_url())


def _peer(fault: FaultProxy) -> RouteTarget:
    """B as A's table lists it, at the fault proxy's address, B's certificate pinned."""
    return RouteTarget(
        node_id=NODE_B,
        kind="peer",
        base_url=fault.url("https"),
        models=["m"],
        cert_der=credentials_for(NODE_B).cert_der,
    )


async def _node_a(
    start_proxy: StartProxy, *targets: RouteTarget, header_timeout_s: float = HEADER_TIMEOUT_S
) -> RunningProxy:
    a = await start_proxy()
    a.targets = ProxyTargets(
        node_id=LOCAL_NODE,
        engines={"ollama": list(targets)},
        pins={"ollama": NODE_B},
        header_timeout_s=header_timeout_s,
        first_content_timeout_s=CONTENT_TIMEOUT_S,
    )
    await a.wait_table()
    return a


@pytest.mark.parametrize("fault", BEFORE_THE_FIRST_BYTE[:3])  # a stall at 0 is a black hole here
async def test_a_fault_on_the_way_to_a_peer_before_the_first_byte_fails_over(
    start_proxy: StartProxy, rig: Rig, fault: Fault
) -> None:
    b, broken = await _node_b(start_proxy, rig)
    engine_c = await rig.engine("c")
    broken.set_fault(fault)
    a = await _node_a(start_proxy, _peer(broken), other("node-c", engine_c.url))

    answer = await chat(a, "t1")

    assert (answer.status, answer.cut) == (200, False)
    assert [r["message"]["content"] for r in answer.records()] == ["c:t1 "] * 4
    assert engine_c.received == ["t1"] and rig.engines[0].received == []
    assert broken.accepted >= 1
    key = (await a.wait_keys(1))[0]
    await finished(a, key)
    assert [k for k in kinds(a, key) if k[0] != "started" or k[1] == 2] == [
        ("submitted", 1, NODE_B),
        ("submitted", 2, "node-c"),
        ("started", 2, "node-c"),
        ("completed", 2, None),
    ]
    assert b.keys() == []  # the request never reached node B's worker


AFTER_THE_FIRST_BYTE = [
    pytest.param("reset", "the engine's response broke off", id="reset"),
    pytest.param("stall", f"the engine sent nothing for {CONTENT_TIMEOUT_S:g} s", id="stall"),
]


@pytest.mark.parametrize(("action", "reason"), AFTER_THE_FIRST_BYTE)
async def test_a_peer_stream_cut_after_the_first_byte_ends_with_an_error_and_no_retry(
    start_proxy: StartProxy, rig: Rig, action: Action, reason: str
) -> None:
    # Tokens 10 ms apart come in TLS records of their own, and the cut falls between records
    # (a record cut in two is never decrypted, and A would have no answer at all).
    b, broken = await _node_b(start_proxy, rig, tokens=40, token_delay=0.01)
    engine_c = await rig.engine("c")
    a = await _node_a(start_proxy, _peer(broken), other("node-c", engine_c.url))
    whole = await chat(a, "whole")  # the bytes of a whole answer on a new link, handshake too
    assert whole.records()[-1]["done"] is True
    size = max(link.sent_down for link in broken.links)
    after = size * 3 // 4  # well past the handshake and the first records, short of the end
    broken.set_fault(Fault(action, after_bytes=after, whole_chunks=True))
    broken.sever()

    answer = await chat(a, "t1")

    assert answer.status == 200
    records = answer.records()
    assert records[0]["message"]["content"] == "b:t1 "
    assert not any(r.get("done") for r in records)
    assert reason in records[-1]["error"] and answer.cut
    assert engine_c.received == []  # never retried elsewhere: no token twice
    key = (await a.wait_keys(2))[1]
    ended = await finished(a, key)
    assert ended["kind"] == "errored" and reason in ended["error"]
    assert [k for k, *_ in kinds(a, key)].count("submitted") == 1
    await b.wait_keys(2)
    assert [e["key"] for e in b.events() if e["kind"] == "submitted"] == [
        f"{(await a.wait_keys(1))[0]}@1",
        f"{key}@1",
    ]  # B served each request once


async def test_a_black_holed_peer_is_given_up_on_within_the_budget_with_a_clear_error(
    start_proxy: StartProxy, rig: Rig
) -> None:
    b, hole = await _node_b(start_proxy, rig)
    hole.set_fault(Fault.blackhole())
    a = await _node_a(start_proxy, _peer(hole), header_timeout_s=DEADLINE_S)

    answer = await chat(a, "t1", timeout=30)

    message = f"no response headers within {DEADLINE_S:g} s"
    assert answer.status == 502 and message in json.loads(answer.lines[0])["error"]
    dispatches = [e for e in a.events() if e["kind"] == "submitted" and e.get("target")]
    assert [e["target"] for e in dispatches] == [NODE_B] * 5 and b.keys() == []
    # Each dispatch dialled once, and at most once more to ask whether it had started.
    assert 5 <= hole.accepted <= 10
    ended = await finished(a, (await a.wait_keys(1))[0])
    assert ended["kind"] == "errored" and message in ended["error"]


async def test_a_busy_peer_is_passed_over_and_busy_everywhere_is_reported_busy(
    start_proxy: StartProxy, rig: Rig
) -> None:
    _, front = await _node_b(start_proxy, rig, behaviour="busy")
    engine_c = await rig.engine("c")
    a = await _node_a(start_proxy, _peer(front), other("node-c", engine_c.url))

    served = await chat(a, "t1")
    assert served.status == 200 and served.records()[-1]["done"] is True
    assert engine_c.received == ["t1"] and rig.engines[0].received == ["t1"]

    engine_c.behaviour = "busy"
    refused = await chat(a, "t2")
    assert refused.status == 503  # B's engine's answer, relayed back unchanged
    assert json.loads(refused.lines[0]) == {"error": "server busy"}
    assert rig.engines[0].received.count("t2") + engine_c.received.count("t2") == 5
    jobs = len(a.keys())

    held = await chat(a, "t3")
    assert held.status == 503 and "busy" in json.loads(held.lines[0])["error"]
    assert len(a.keys()) == jobs and "t3" not in rig.engines[0].received + engine_c.received
