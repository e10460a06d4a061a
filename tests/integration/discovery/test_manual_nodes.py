"""Discovery between real brokers on loopback: manual nodes, engine-only addresses, errors, and
a node found both by address and over mDNS appearing once."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from backend.common import tls
from backend.components.identity.certificate import mint
from backend.protocol import errors
from backend.protocol.types.base import NodeId
from tests.integration.conftest import ROOT, Broker, Client, free_port, wait_until_serving

StartBroker = Callable[..., Broker]
FAST = {
    "PAIR_DISCOVERY_PROBE_INTERVAL": "0.3",
    "PAIR_DISCOVERY_SCAN_INTERVAL": "0.5",
    "PAIR_DISCOVERY_TELEMETRY_INTERVAL": "0.5",
}


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in FAST.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def no_mdns(fast: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAIR_DISCOVERY_MDNS", "0")


@pytest.fixture
def with_mdns(fast: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """mDNS on for this test's brokers (tests/conftest.py turns it off for all others)."""
    monkeypatch.delenv("PAIR_DISCOVERY_MDNS", raising=False)


def start_together(start_broker: StartBroker) -> tuple[Broker, Broker]:
    """Two brokers started at once (their start-ups overlap), both serving on return."""
    brokers = start_broker(wait=False), start_broker(wait=False)
    for broker in brokers:
        wait_until_serving(broker)
    return brokers


def node_port(broker: Broker) -> int:
    argv: list[str] = broker.process.args  # type: ignore[assignment]
    return int(argv[argv.index("--node-port") + 1])


async def wait_nodes(
    client: Client, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 20.0
) -> list[dict[str, Any]]:
    async with asyncio.timeout(timeout):
        while not predicate(nodes := await client.call("discovery:get-nodes")):
            await asyncio.sleep(0.2)
    return nodes


def by_id(nodes: list[dict[str, Any]], node_id: str) -> dict[str, Any] | None:
    return next((node for node in nodes if node["node_id"] == node_id), None)


async def test_a_manual_pair_node_appears_with_its_uuid_and_models_then_leaves(
    no_mdns: None, start_broker: StartBroker
) -> None:
    first, second = start_together(start_broker)
    async with first.connect() as client, second.connect() as other:
        other_id = (await other.call("status"))["node_id"]
        other_info = await other.call("nodeinfo:get")
        snapshot = await client.call("discovery:subscribe")
        added = await client.call("node/add", {"address": "127.0.0.1", "port": node_port(second)})
        assert added["id"] == f"manual:127.0.0.1:{node_port(second)}"
        joined = await client.wait_push(
            "discovery:event", lambda e: e["event"] == "node_joined" and e["node_id"] == other_id
        )
        node = joined["node"]
        assert node["sources"] == ["manual"] and node["kind"] == "pair" and node["reachable"]
        assert node["name"] == other_info["name"] and node["manual_id"] == added["id"]
        assert node["engines"] == other_info["engines"]
        assert node["ports"]["node"] == node_port(second)
        assert "telemetry" in node and node["addresses"][0] == "127.0.0.1"
        listed = await client.call("nodes/list")
        assert [(m["id"], m["state"], m["node_id"]) for m in listed] == [
            (added["id"], "pair", other_id)
        ]
        # Adding it again returns the entry as it is: the same one, probed meanwhile perhaps
        # (every 0.3 s here), so seen as late or later.
        again = await client.call("node/add", {"address": "127.0.0.1", "port": node_port(second)})
        assert {**again, "last_seen": None} == {**listed[0], "last_seen": None}
        assert again["last_seen"] >= listed[0]["last_seen"]
        await client.call("node/remove", {"id": added["id"]})
        await client.wait_push(
            "discovery:event", lambda e: e["event"] == "node_left" and e["node_id"] == other_id
        )
        assert await client.call("nodes/list") == []
        events = [p for m, p in client.pushes if m == "discovery:event"]
        seqs = [event["seq"] for event in events]
        assert seqs == list(range(snapshot["seq"] + 1, snapshot["seq"] + 1 + len(seqs)))


async def test_pair_node_add_with_host_and_port_reaches_the_node_api_there(
    no_mdns: None, start_broker: StartBroker
) -> None:
    first, second = start_together(start_broker)
    port = node_port(second)  # the node API listens on every address, so on 127.0.0.2 too
    command = ["node", "add", f"127.0.0.2:{port}", "--data-dir", str(first.data_dir)]
    added = subprocess.run(
        [sys.executable, "-m", "backend", *command],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert added.returncode == 0, added.stderr
    assert f"added manual:127.0.0.2:{port};" in added.stdout
    async with first.connect() as client, second.connect() as other:
        other_id = (await other.call("status"))["node_id"]
        listed = await client.call("nodes/list")
        assert [(m["id"], m["address"], m["port"]) for m in listed] == [
            (f"manual:127.0.0.2:{port}", "127.0.0.2", port)
        ]
        nodes = await wait_nodes(client, lambda n: by_id(n, other_id) is not None)
        node = by_id(nodes, other_id)
        assert node is not None and node["sources"] == ["manual"] and node["reachable"]
        assert node["addresses"][0] == "127.0.0.2"
        assert [(m["state"], m["node_id"]) for m in await client.call("nodes/list")] == [
            ("pair", other_id)
        ]


async def test_manual_nodes_are_persisted_across_restarts(
    no_mdns: None, start_broker: StartBroker
) -> None:
    first = start_broker()
    async with first.connect() as client:
        await client.call("node/add", {"address": "localhost", "port": free_port(), "name": "x"})
    first.stop()
    again = start_broker(data_dir=first.data_dir)
    async with again.connect() as client:
        listed = await client.call("nodes/list")
    assert [(m["address"], m["name"]) for m in listed] == [("localhost", "x")]


@pytest.fixture
def ollama_emulator() -> Iterator[int]:
    """The Ollama emulator (standing in for a real Ollama) on a free port, stopped by PID."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "backend",
            "emulate",
            "ollama",
            "--port",
            str(port),
            "--models",
            "llama3.2,qwen2.5:0.5b",
        ],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/api/version", timeout=0.5)
                break
            except httpx.HTTPError:
                if process.poll() is not None:
                    raise AssertionError("the Ollama emulator exited") from None
                import time

                time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(10)


async def test_an_address_running_only_the_ollama_emulator_is_an_engine_only_node(
    no_mdns: None, start_broker: StartBroker, ollama_emulator: int
) -> None:
    broker = start_broker()
    async with broker.connect() as client:
        added = await client.call("node/add", {"address": "127.0.0.1", "port": ollama_emulator})
        nodes = await wait_nodes(client, lambda n: by_id(n, added["id"]) is not None)
        node = by_id(nodes, added["id"])
        assert node is not None
        assert node["kind"] == "engine" and node["sources"] == ["manual"]
        assert node["ports"] == {"ollama": ollama_emulator}
        assert node["engines"]["ollama"]["models"] == ["llama3.2:latest", "qwen2.5:0.5b"]
        assert (await client.call("nodes/list"))[0]["state"] == "engine"
        await asyncio.sleep(2.0)  # several probe and telemetry rounds later it is still up
        node = by_id(await client.call("discovery:get-nodes"), added["id"])
        assert node is not None and node["reachable"]


async def test_an_unreachable_manual_node_raises_an_error_after_three_probes(
    no_mdns: None, start_broker: StartBroker
) -> None:
    broker = start_broker()
    dead_port = free_port()
    async with broker.connect() as client:
        added = await client.call("node/add", {"address": "127.0.0.1", "port": dead_port})
        error_id = f"discovery:manual-unreachable:{added['id']}"
        update = await client.wait_push(
            "errors:update", lambda entries: any(e["id"] == error_id for e in entries)
        )
        listed = await client.call("nodes/list")
        assert listed[0]["state"] == "unreachable" and listed[0]["failures"] >= 3
        assert any(str(dead_port) in e["message"] for e in update if e["id"] == error_id)
        await client.call("node/remove", {"id": added["id"]})
        assert error_id not in {e["id"] for e in (await client.call("status"))["errors"]}


async def test_bad_manual_input_gets_clear_errors(no_mdns: None, start_broker: StartBroker) -> None:
    broker = start_broker()
    async with broker.connect() as client:
        for params, text in [
            ({"address": ""}, "give the other computer's address"),
            ({"address": "10.0.0.1", "port": 0}, "outside 1-65535"),
            ({"address": "10.0.0.1", "port": 65536}, "outside 1-65535"),
            ({"address": "10.0.0.1", "port": "x"}, "port"),
            ({}, "address"),
            # The port goes in ``port``: never probed as https://10.0.0.5:14320:14320/.
            ({"address": "10.0.0.5:14320"}, "the port goes separately"),
            ({"address": "[::1"}, "close the IPv6 address"),
            ({"address": "a b"}, "no spaces"),
        ]:
            with pytest.raises(errors.InvalidParams, match=text) as caught:
                await client.call("node/add", params)
            assert caught.value.code == -32602
        assert await client.call("nodes/list") == []
        with pytest.raises(errors.NotFound, match="no manual node"):
            await client.call("node/remove", {"id": "manual:nope:1"})


@pytest.fixture
async def hostile_node_api() -> AsyncIterator[tuple[int, list[str]]]:
    """A fake node API answering garbage: huge bodies, wrong types, another UUID."""
    modes = ["huge"]

    async def node_info(_: web.Request) -> web.StreamResponse:
        if modes[0] == "huge":
            return web.Response(body=b'{"node_id": "' + b"a" * (2 * 1024 * 1024) + b'"}')
        if modes[0] == "types":
            return web.json_response({"node_id": 5, "name": ["x"], "engines": "none"})
        return web.Response(body=b"not json at all")

    app = web.Application()
    app.router.add_get("/v1/node-info", node_info)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    # A node API speaks TLS; this one has a certificate of its own and garbage to say.
    context = tls.server_context(mint(NodeId("dddddddd-0000-4000-8000-00000000000d")), ())
    site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=context)
    await site.start()
    try:
        yield port, modes
    finally:
        await runner.cleanup()


async def test_malformed_node_info_answers_are_ignored_and_discovery_keeps_running(
    no_mdns: None, start_broker: StartBroker, hostile_node_api: tuple[int, list[str]]
) -> None:
    port, modes = hostile_node_api
    broker = start_broker()
    async with broker.connect() as client:
        added = await client.call("node/add", {"address": "127.0.0.1", "port": port})
        for mode, reason in (("huge", "limit"), ("types", "malformed"), ("text", "JSON")):
            modes[0] = mode
            async with asyncio.timeout(15):
                while True:
                    entry = (await client.call("nodes/list"))[0]
                    if reason in entry.get("last_error", ""):
                        break
                    await asyncio.sleep(0.2)
            assert entry["state"] != "pair" and entry["failures"] >= 1
        assert by_id(await client.call("discovery:get-nodes"), added["id"]) is None
        status = await client.call("status")
        discovery = next(c for c in status["components"] if c["name"] == "discovery")
        assert discovery["status"] == "running" and discovery["restarts"] == 0
    assert any(
        "over the" in r.get("msg", "") or "malformed" in r.get("msg", "") for r in broker.logs()
    ), "the broker's log says why the node's answers were refused"


async def test_a_manual_node_also_found_over_mdns_appears_once(
    with_mdns: None, start_broker: StartBroker
) -> None:
    first, second = start_together(start_broker)
    async with first.connect() as client, second.connect() as other:
        other_id = (await other.call("status"))["node_id"]
        try:
            await wait_nodes(client, lambda n: by_id(n, other_id) is not None, timeout=15)
        except TimeoutError:
            pytest.skip("no multicast between two brokers on this host's interfaces")
        await client.call("node/add", {"address": "127.0.0.1", "port": node_port(second)})
        nodes = await wait_nodes(
            client, lambda n: (by_id(n, other_id) or {}).get("sources") == ["mdns", "manual"]
        )
        assert [node["node_id"] for node in nodes].count(other_id) == 1
