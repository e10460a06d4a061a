"""The replica benchmark's cluster: three real brokers on this computer, paired by PIN.

Not run by hand (``bench/replicas.py`` uses it). Each node is a ``pair node`` process on its own
loopback address (127.0.0.2-4, mDNS off, the others added by address) whose Ollama is the
emulator at a steady pace (``--token-delay``, one slot per model) and load time
(``--load-delay``), started through an engine override document as the integration tests do.
A invites B and C and accepts each by the PIN the RPC hands back. Every broker started here is
stopped here, by its own PID, and its engine with it.

At the start the hot model is the user's on A (``engine:action load_model``, no ``replica``),
on disk on B and C; each steady model is the user's on one of B and C.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from _replicas_trace import HOT, STEADY

from backend.protocol import methods
from backend.protocol.types.jobs import JobRecord
from backend.workers.proxy.upstream.forward import SERVED_BY_HEADER
from tests.integration.cluster.test_three_nodes import _pair, _until
from tests.integration.conftest import ROOT, Broker, Client, free_port, node_argv
from tests.integration.conftest import wait_until_serving as _wait_until_serving
from tests.integration.discovery.test_manual_nodes import FAST
from tests.integration.engines.conftest import write_override, write_script

MODELS = (HOT, *STEADY)
LOAD_S = 12.0  # a 7-8 GB model from an SSD into a GPU
TOKEN_S = 0.05  # per token: a request of the trace's mean length takes about a second
ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
NAMES = ("A", "B", "C")
# The models each node's user loaded at the start: the hot one on A, one steady model each on
# B and C.
USER_LOADED = ((HOT,), (STEADY[0],), (STEADY[1],))
ACTION_TIMEOUT_S = 120.0  # a load waits on the engine's exclusive gate behind running requests

# The Ollama emulator standing in for ``ollama serve``, at a steady pace and load time.
_SHIM = """#!{python}
import os, sys
host, _, port = os.environ.get("OLLAMA_HOST", "127.0.0.1:11434").rpartition(":")
argv = [sys.executable, "-m", "backend", "emulate", "ollama", "--host", host, "--port", port,
        "--parallel", "1", *ARGS]
if sys.argv[1:] != ["serve"]:
    sys.exit("this shim only knows `ollama serve`")
os.execv(sys.executable, argv)
"""


def _engine_override(folder: Path, name: str) -> dict[str, Any]:
    """An engine override whose Ollama is the paced emulator with every model on disk."""
    args = [
        *("--models", ",".join(MODELS), "--load-delay", str(LOAD_S)),
        *("--token-delay", str(TOKEN_S), "--reply-tokens", "100000"),
        *("--prompt-token-delay", "0", "--first-token-delay", "0", "--keep-alive", "86400"),
    ]
    shim = write_script(folder / f"ollama-{name}", _SHIM.replace("*ARGS", repr(args)[1:-1]))
    return {
        "detect": [{"path": str(shim)}],
        "runtime": {"port": free_port(), "ready": {"timeout_s": 60}},
    }


@dataclass
class Node:
    """One broker of the rig: its name in the report, address, process, client, status."""

    name: str
    address: str
    broker: Broker
    client: Client | None = None
    node_id: str = ""
    node_port: int = 0
    door: str = ""


class Rig:
    """Three paired brokers; ``nodes[0]`` (A) is the one whose door the trace is played at."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.nodes: list[Node] = []
        self._clients = contextlib.AsyncExitStack()

    @property
    def a(self) -> Client:
        client = self.nodes[0].client
        assert client is not None
        return client

    def label(self, node_id: str | None) -> str:
        """A node's name in the report (A, B, C) from its id."""
        return next((n.name for n in self.nodes if n.node_id == node_id), str(node_id))

    async def start(self) -> None:
        """Start the brokers and their engines, pair A with B and with C."""
        for name, address in zip(NAMES, ADDRESSES, strict=True):
            self.nodes.append(await asyncio.to_thread(self._start_broker, name, address))
        for node in self.nodes:
            node.client = await self._clients.enter_async_context(node.broker.connect())
            await node.client.call(methods.ENGINE_START, {"engine": "ollama"}, timeout=90)
            await node.client.call(methods.SETTINGS_SET, {"values": {"node_name": node.name}})
            status = await node.client.typed(methods.STATUS)
            node.node_id, node.node_port = status.node_id, status.ports.node
            node.door = status.front_doors["ollama"]
        for node in self.nodes[1:]:
            assert node.client is not None
            await _pair(self.a, node.client, node.address, node.node_port)
            await self.a.call(methods.NODE_ADD, {"address": node.address, "port": node.node_port})
        ids = {node.node_id for node in self.nodes[1:]}
        # A reaches B and C over the member link (and lists their engines) a moment later.
        await _until(self.a, methods.DISCOVERY_GET_NODES, lambda ns: ids <= engines_known(ns), 60)
        await _until(
            self.a, methods.CLUSTER_STATUS, lambda s: ids <= {m.node_id for m in s.members}, 60
        )

    def _start_broker(self, name: str, address: str) -> Node:
        data_dir = self.folder / f"node-{name.lower()}"
        write_override(data_dir, "ollama", _engine_override(self.folder, name.lower()))
        env = {**os.environ, **FAST, "PAIR_DISCOVERY_MDNS": "0"}
        stderr_path = self.folder / f"node-{name.lower()}.log"
        with stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                node_argv(data_dir),
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
            )
        broker = Broker(process, data_dir, stderr_path)
        try:
            _wait_until_serving(broker, timeout=60)
        except BaseException:
            broker.stop()
            raise
        return Node(name, address, broker)

    async def stop(self) -> None:
        """Close the clients, stop every broker (and so its engine), last first."""
        with contextlib.suppress(Exception):
            await self._clients.aclose()
        for node in reversed(self.nodes):
            await asyncio.to_thread(node.broker.stop, 30)

    async def action(self, action: str, model: str, node: Node, **extra: Any) -> None:
        """``engine:action`` at A, on ``node`` (through the member link for B and C)."""
        params: dict[str, Any] = {"engine": "ollama", "action": action, "model": model, **extra}
        if node is not self.nodes[0]:
            params["node"] = node.node_id
        await self.a.call(methods.ENGINE_ACTION, params, timeout=ACTION_TIMEOUT_S)

    async def load_user_models(self) -> None:
        """Each node's user's models, loaded at each node (in parallel: one load each)."""
        await asyncio.gather(
            *(
                own(node).call(
                    methods.ENGINE_ACTION,
                    {"engine": "ollama", "action": "load_model", "model": model},
                    timeout=ACTION_TIMEOUT_S,
                )
                for node, models in zip(self.nodes, USER_LOADED, strict=True)
                for model in models
            )
        )

    async def settings(self, **values: Any) -> None:
        """``settings:set`` on A."""
        await self.a.call(methods.SETTINGS_SET, {"values": values})

    async def warm_up(self) -> None:
        """One hot request at A's door served by each member (A pinned to it in turn), then the
        hot model unloaded wherever a member holds it: A's placement has measured their load
        times. A pin reaches A's table a moment after it is set, so a request may still go to
        the member pinned before (and load the model there): hence the unloads at the end,
        on every member that served one (A's discovery may not list the load yet)."""
        served: set[str | None] = set()
        for node in self.nodes[1:]:
            await self.settings(proxy_pinned_node=node.node_id)
            try:
                async with asyncio.timeout(ACTION_TIMEOUT_S):
                    while (answered := await served_by(self.nodes[0].door)) != node.node_id:
                        served.add(answered)
                        await asyncio.sleep(0.5)  # A's table does not route there yet
                served.add(answered)
            finally:
                await self.settings(proxy_pinned_node="")
        for node in self.nodes[1:]:
            if node.node_id in served:
                await self.unload_hot(node)

    async def unload_hot(self, node: Node) -> None:
        """Unload the hot model on ``node`` and wait until A's discovery sees it gone."""
        await self.action("unload_model", HOT, node)
        await _until(
            self.a, methods.DISCOVERY_GET_NODES, lambda ns: not hot_on(ns, node.node_id), 60
        )

    async def hot_loaded_on(self) -> list[Node]:
        """The members A's discovery says hold the hot model now."""
        nodes = await self.a.typed(methods.DISCOVERY_GET_NODES)
        return [n for n in self.nodes[1:] if hot_on(nodes, n.node_id)]

    async def jobs(self, since: float) -> list[JobRecord]:
        """A's jobs created at or after ``since`` (wall clock), oldest first."""
        answer = await self.a.typed(methods.JOBS_GET_INITIAL, {"limit": 1000}, timeout=30)
        return sorted((j for j in answer.jobs if j.created_at >= since), key=lambda j: j.created_at)

    def log_lines(self, node: Node, keep: Callable[[str], bool]) -> list[str]:
        """The lines of ``node``'s broker log that ``keep`` picks."""
        text = node.broker.stderr_path.read_text(errors="replace")
        return [line for line in text.splitlines() if keep(line)]


def own(node: Node) -> Client:
    """``node``'s own RPC client."""
    assert node.client is not None
    return node.client


def engines_known(nodes: list[Any]) -> set[str]:
    """The nodes a discovery listing shows with their Ollama reachable."""
    return {node.node_id for node in nodes if "ollama" in node.engines}


def hot_on(nodes: list[Any], node_id: str) -> bool:
    """Whether a discovery listing shows the hot model loaded on ``node_id``."""
    for node in nodes:
        if node.node_id == node_id and "ollama" in node.engines:
            return HOT in (node.engines["ollama"].loaded or [])
    return False


async def served_by(door: str) -> str | None:
    """One short hot request at ``door``: the node that served it (None when it failed)."""
    body = {
        "model": HOT,
        "messages": [{"role": "user", "content": "warm-up"}],
        "stream": False,
        "options": {"num_predict": 4},
    }
    timeout = aiohttp.ClientTimeout(total=ACTION_TIMEOUT_S)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(f"{door}/api/chat", json=body) as response,
    ):
        await response.read()
        return response.headers.get(SERVED_BY_HEADER) if response.status == 200 else None
