"""A member that restarts drops out of the table for a while: what it served is remembered, so
a door answers 503 naming it (worth retrying) instead of 404 (final)."""

from __future__ import annotations

import aiohttp
from aiohttp.test_utils import TestClient, TestServer

from backend.components.cluster.members import Member, Membership
from backend.components.proxy.away import AWAY_FOR_S, AwayMemory, local_away
from backend.components.proxy.table import LocalEngine, TableSource
from backend.protocol.proxy import AwayModels, ProxyTargets, RouteTarget
from backend.protocol.types.base import NodeId
from backend.protocol.types.nodes import DiscoveredNode, NodeEngineModels
from backend.workers.proxy.doors.app import CONTEXT_KEY, build_app
from backend.workers.proxy.routing.candidates import away_owner
from tests.unit.proxy.test_door_app import _context


def _peer(node_id: str, models: list[str]) -> RouteTarget:
    return RouteTarget(
        node_id=node_id, kind="peer", base_url="https://x:1", name=f"{node_id} box", models=models
    )


def test_a_member_that_left_is_away_with_what_it_served_until_the_bound() -> None:
    memory = AwayMemory()
    assert memory.update({"ollama": [_peer("gpu", ["qwen:7b"])]}, {"gpu"}, now=0.0) == []
    gone = memory.update({}, {"gpu"}, now=10.0)
    assert gone == [AwayModels(node_id="gpu", name="gpu box", engine="ollama", models=["qwen:7b"])]
    assert memory.update({}, {"gpu"}, now=AWAY_FOR_S - 1) == gone  # counted from when it served
    assert memory.update({}, {"gpu"}, now=AWAY_FOR_S + 1) == []  # then forgotten


def test_an_unpaired_member_or_one_back_with_other_models_is_not_away() -> None:
    memory = AwayMemory()
    memory.update({"ollama": [_peer("gpu", ["qwen:7b"])]}, {"gpu"}, now=0.0)
    assert memory.update({}, set(), now=1.0) == []  # unpaired: forgotten at once
    assert memory.update({}, {"gpu"}, now=2.0) == []
    memory.update({"ollama": [_peer("gpu", ["qwen:7b"])]}, {"gpu"}, now=3.0)
    # Back, listing other models: only what it lists counts.
    assert memory.update({"ollama": [_peer("gpu", ["phi3"])]}, {"gpu"}, now=4.0) == []


def test_one_engine_of_a_member_restarting_is_away_while_the_other_serves() -> None:
    memory = AwayMemory()
    both = {"ollama": [_peer("gpu", ["qwen:7b"])], "lmstudio": [_peer("gpu", ["gemma"])]}
    memory.update(both, {"gpu"}, now=0.0)
    away = memory.update({"lmstudio": both["lmstudio"]}, {"gpu"}, now=1.0)
    assert [(a.engine, a.models) for a in away] == [("ollama", ["qwen:7b"])]


def test_the_table_source_remembers_a_member_through_its_restart() -> None:
    member = Member(
        node_id=NodeId("gpu"),
        name="gpu box",
        cert_der=b"cert",
        fingerprint="sha256:gpu",
        added_by=NodeId("me"),
        added_at=1.0,
        address="192.168.1.9",
        node_port=47800,
    )
    membership = Membership(cluster_id="c", members={NodeId("gpu"): member})
    node = DiscoveredNode(
        node_id="gpu",
        name="gpu box",
        kind="pair",
        sources=["mdns"],
        addresses=["192.168.1.9"],
        ports={"node": 47800, "relay": 47821},
        engines={"ollama": NodeEngineModels(models=["qwen:7b"])},
        reachable=True,
    )
    nodes = [node]
    now = [0.0]
    source = TableSource(
        node_id=lambda: "me",
        local=lambda: {"ollama": LocalEngine("http://127.0.0.1:1", ["llama3"])},
        nodes=lambda: nodes,
        loads=dict,
        timeouts=lambda: (1.0, 1.0),
        members=lambda: membership,
        clock=lambda: now[0],
    )
    assert source().away == []
    nodes.clear()  # its broker restarts: discovery drops it
    now[0] = 5.0
    table = source()
    assert away_owner(table, "qwen:7b") is not None
    assert away_owner(table, "llama3") is None


async def test_the_door_answers_503_naming_the_member_and_404_for_a_model_nobody_had() -> None:
    away = AwayModels(node_id="gpu", name="gpu-box", engine="ollama", models=["qwen:7b"])
    local = RouteTarget(node_id="me", kind="local", base_url="http://127.0.0.1:9", models=["x"])
    async with aiohttp.ClientSession() as session:
        context = _context("ollama", session)
        context.router.update(ProxyTargets(node_id="me", engines={"ollama": [local]}, away=[away]))
        app = build_app(context)
        assert app[CONTEXT_KEY] is context
        async with TestClient(TestServer(app)) as client:
            waiting = await client.post("/api/chat", json={"model": "qwen:7b"})
            assert waiting.status == 503 and waiting.headers["Retry-After"] == "5"
            assert "gpu-box" in (await waiting.json())["error"]
            unknown = await client.post("/api/chat", json={"model": "mistral"})
            assert unknown.status == 404


def test_this_nodes_engine_coming_back_after_a_crash_is_away_until_it_serves_again() -> None:
    local: dict[str, LocalEngine] = {"ollama": LocalEngine("http://127.0.0.1:1", ["llama3"])}
    returning: dict[str, list[str]] = {}
    source = TableSource(
        node_id=lambda: "me",
        local=lambda: local,
        nodes=list,
        loads=dict,
        timeouts=lambda: (1.0, 1.0),
        local_away=lambda: local_away(returning, "me", "gaming-pc"),
    )
    assert source().away == []
    local.clear()  # it crashed: out of the table, and PAIR restarts it
    returning["ollama"] = ["llama3"]
    table = source()
    found = away_owner(table, "llama3")
    assert found == AwayModels(node_id="me", name="gaming-pc", engine="ollama", models=["llama3"])
    returning.clear()  # stopped on purpose, or given up on: not found
    assert away_owner(source(), "llama3") is None


def test_an_engine_coming_back_with_no_models_listed_is_not_away() -> None:
    assert local_away({"ollama": [], "lmstudio": ["m"]}, "me", "pc") == [
        AwayModels(node_id="me", name="pc", engine="lmstudio", models=["m"])
    ]
