"""The node API of a real broker: node-info over HTTP, errors, a taken port, engines, identity."""

from __future__ import annotations

import asyncio
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.integration.conftest import Broker, Client, free_port, serving_broker
from tests.integration.engines.conftest import OLLAMA_SHIM, write_override, write_script

StartBroker = Callable[..., Broker]


def _port_flags() -> tuple[dict[str, int], list[str]]:
    ports = {name: free_port() for name in ("node", "ollama", "openai", "llamacpp", "relay")}
    flags = [item for name, port in ports.items() for item in (f"--{name}-port", str(port))]
    return ports, flags


async def _node_info(port: int) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=5, verify=False) as http:  # node-info is public
        response = await http.get(f"https://127.0.0.1:{port}/v1/node-info")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    payload: dict[str, Any] = response.json()
    return payload


async def _wait_node_info(
    port: int, predicate: Callable[[dict[str, Any]], bool], timeout: float = 20.0
) -> dict[str, Any]:
    async with asyncio.timeout(timeout):
        while not predicate(info := await _node_info(port)):
            await asyncio.sleep(0.25)
    return info


@pytest.fixture(scope="module")
def shared_node(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Broker, dict[str, int]]]:
    """One broker and its ports, for the tests that only read its node API (a fresh broker
    would answer them the same)."""
    folder = tmp_path_factory.mktemp("shared-node")
    ports, flags = _port_flags()
    with serving_broker(folder, *flags) as broker:
        yield broker, ports


def _component(status: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in status["components"] if c["name"] == name)
    return found


async def test_node_info_over_http_describes_this_node(
    shared_node: tuple[Broker, dict[str, int]],
) -> None:
    broker, ports = shared_node
    async with broker.connect() as client:
        status = await client.call("status")
        info = await _wait_node_info(
            ports["node"], lambda i: "utilization_percent" in i["cpu"], timeout=10
        )
        over_rpc = await client.call("nodeinfo:get")
    assert info["node_id"] == status["node_id"] == over_rpc["node_id"]
    assert info["name"] == status["node_name"] == over_rpc["name"]
    assert info["ports"] == ports == over_rpc["ports"]
    assert info["memory"]["total_bytes"] == psutil.virtual_memory().total
    assert 0 < info["memory"]["used_bytes"] < info["memory"]["total_bytes"]
    assert info["cpu"]["cores"] == psutil.cpu_count()
    assert 0.0 <= info["cpu"]["utilization_percent"] <= 100.0
    assert info["telemetry_valid"] is True and 0 <= info["telemetry_age_ms"] < 3000
    assert isinstance(info["gpus"], list)
    assert info["os"]["system"] and info["version"]
    assert "cluster_id" not in info
    assert info["engines"] == {}


async def test_the_node_api_listens_on_every_interface(
    shared_node: tuple[Broker, dict[str, int]],
) -> None:
    broker, ports = shared_node
    listening = [
        connection.laddr
        for connection in psutil.Process(broker.process.pid).net_connections(kind="tcp")
        if connection.status == psutil.CONN_LISTEN and connection.laddr.port == ports["node"]
    ]
    assert [address.ip for address in listening] == ["0.0.0.0"]


async def test_unknown_paths_and_wrong_methods_answer_json(
    shared_node: tuple[Broker, dict[str, int]],
) -> None:
    _, ports = shared_node
    base = f"https://127.0.0.1:{ports['node']}"
    async with httpx.AsyncClient(timeout=5, verify=False) as http:
        missing = await http.get(f"{base}/v1/nope")
        wrong = await http.post(f"{base}/v1/node-info", content=b"x" * 200_000)
        head = await http.head(f"{base}/v1/node-info")
    assert missing.status_code == 404
    assert missing.json() == {"error": "no such path: /v1/nope"}
    assert wrong.status_code == 405
    assert "POST" in wrong.json()["error"] and "GET" in wrong.headers["allow"]
    assert head.status_code == 200


@pytest.fixture(params=["0.0.0.0", "127.0.0.1"])
def foreign_listener(request: pytest.FixtureRequest) -> Iterator[socket.socket]:
    """Another program's listening socket on a free port (all interfaces, or loopback only)."""
    with socket.socket() as listener:
        listener.bind((request.param, 0))
        listener.listen()
        yield listener


async def test_a_node_port_held_by_another_program_fails_the_component_not_the_broker(
    start_broker: StartBroker, foreign_listener: socket.socket
) -> None:
    port = foreign_listener.getsockname()[1]
    _, flags = _port_flags()
    broker = start_broker(*flags, "--node-port", str(port))
    async with broker.connect() as client:
        status = await client.call("status")
        node_api = _component(status, "node-api")
        assert node_api["status"] == "failed"
        assert str(port) in node_api["last_error"]
        crash = next(e for e in status["errors"] if e["id"] == "supervisor:crashed:node-api")
        assert str(port) in crash["message"]
        assert _component(status, "nodeinfo")["status"] == "running"
        assert (await client.call("nodeinfo:get"))["ports"]["node"] == port
        assert (await client.call("ping"))["pong"] is True
    assert broker.process.poll() is None
    with socket.create_connection(("127.0.0.1", port), timeout=2) as probe:
        accepted, _ = foreign_listener.accept()
        accepted.close()
        assert probe.fileno() >= 0


@pytest.fixture
def ollama_data_dir(tmp_path: Path) -> Path:
    """A data dir whose ``ollama`` is the Ollama emulator shim on a free port."""
    data_dir = tmp_path / "node-ollama"
    shim = write_script(tmp_path / "ollama", OLLAMA_SHIM)
    write_override(
        data_dir,
        "ollama",
        {
            "detect": [{"path": str(shim)}],
            "runtime": {"port": free_port(), "ready": {"timeout_s": 30}},
        },
    )
    return data_dir


async def _load(client: Client, model: str) -> None:
    params = {"engine": "ollama", "action": "load_model", "model": model}
    await client.call("engine:action", params, timeout=60)


async def test_node_info_lists_a_running_engines_models(
    start_broker: StartBroker, ollama_data_dir: Path
) -> None:
    ports, flags = _port_flags()
    broker = start_broker(*flags, data_dir=ollama_data_dir)
    async with broker.connect() as client:
        assert (await _node_info(ports["node"]))["engines"] == {}
        await client.call("engine:start", {"engine": "ollama"}, timeout=60)
        listed = await _wait_node_info(
            ports["node"], lambda i: "models" in i["engines"].get("ollama", {})
        )
        assert set(listed["engines"]["ollama"]["models"]) == {"tinyllama:latest", "qwen2:0.5b"}
        await _load(client, "qwen2:0.5b")
        loaded = await _wait_node_info(
            ports["node"], lambda i: i["engines"]["ollama"].get("loaded") == ["qwen2:0.5b"]
        )
        assert loaded["engines"] == (await client.call("nodeinfo:get"))["engines"]
        await client.call("engine:stop", {"engine": "ollama"}, timeout=30)
        await _wait_node_info(ports["node"], lambda i: i["engines"] == {})


async def test_identity_survives_restarts_and_a_copied_data_dir_gets_its_own(
    start_broker: StartBroker, tmp_path: Path
) -> None:
    original_dir = tmp_path / "original"
    ports, flags = _port_flags()
    first = start_broker(*flags, data_dir=original_dir)
    async with first.connect() as client:
        node_id = (await client.call("status"))["node_id"]
    assert first.stop() == 0
    shutil.copytree(original_dir, tmp_path / "copy")
    copy = start_broker(*_port_flags()[1], data_dir=tmp_path / "copy")
    async with copy.connect() as client:
        status = await client.call("status")
    assert status["node_id"] != node_id
    warning = next(e for e in status["errors"] if e["id"] == "identity:copied")
    assert warning["severity"] == "warning" and node_id in warning["message"]
    again = start_broker(*flags, data_dir=original_dir)
    async with again.connect() as client:
        status = await client.call("status")
    assert status["node_id"] == node_id
    assert not any(e["id"] == "identity:copied" for e in status["errors"])
    assert (await _node_info(ports["node"]))["node_id"] == node_id
