"""The soak's cluster: three real ``pair node`` brokers, each with an emulated Ollama, paired.

Not a benchmark itself; ``bench/soak.py`` drives it. Each node has a data dir of its own under
the soak's root, free ports (never PAIR's or the engines' defaults), mDNS off, and keys in files.
Its Ollama is PAIR's emulator behind an ``ollama`` shim, so the broker owns the engine process
(starts it, restarts it when it crashes, stops it with the broker). Node ``a`` invites ``b`` and
``c`` with PINs through the RPC, as ``pair demo`` does; ``b`` and ``c`` trust each other through
the roster, and every node knows the other two as manual nodes on 127.0.0.1 (with ``--netns``,
at its namespace's address, and its doors through ``bench/_soak_netns.py``'s forwarders).

``Cluster`` owns the broker processes (each in its own session, killed by the kernel if the
soak dies) and signals only those, by PID: a stop is SIGTERM, then SIGKILL after a grace. The
chaos it can cause (an engine or a proxy worker killed with SIGKILL) is aimed at PIDs the
broker reports for its own children.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import aiohttp

from backend.core.processes import child_env, child_preexec, stop_child
from backend.devtools.demo import (
    OLLAMA_SHIM,
    PROJECT_ROOT,
    connect,
    free_port,
    wait_broker_ready,
)
from backend.protocol import contract, methods
from backend.protocol.contract import Method, NoParams
from backend.protocol.types.base import EngineName
from backend.protocol.types.broker import BrokerStatus
from backend.protocol.types.cluster import InviteAnswer, InviteParams, JoinWindowParams
from backend.protocol.types.engines import EngineRef, EngineStatus
from backend.protocol.types.nodes import ManualNodeAdd
from bench._soak_netns import SoakNetwork

P = TypeVar("P")
R = TypeVar("R")

SHARED_MODEL: Final = "shared:latest"
DOORS: Final = ("ollama", "openai", "llamacpp")
OLLAMA: Final = EngineName("ollama")
BROKER_START_TIMEOUT: Final = 60.0
BROKER_STOP_GRACE: Final = 15.0  # the broker's own staged shutdown takes at most 10 s
ENGINE_START_TIMEOUT: Final = 60.0
ROUTABLE_TIMEOUT: Final = 90.0
# Fast enough that a request spans several tokens, slow enough that chaos lands mid-stream.
EMULATOR_ARGS: Final = ("--load-delay", "0.3", "--token-delay", "0.01", "--keep-alive", "600")
ENGINE_PARALLEL: Final = 2
NODE_NAMES: Final = ("a", "b", "c")


class ClusterError(Exception):
    """The cluster could not be brought up (or back); the message says which node and why."""


@dataclass
class SoakNode:
    """One node: its name, data dir, ports, models and (while up) its broker process."""

    name: str
    data_dir: Path
    ports: dict[str, int]
    models: tuple[str, ...]
    process: asyncio.subprocess.Process | None = None
    front_doors: dict[str, str] = field(default_factory=dict)
    node_id: str = ""
    starts: int = 0
    address: str = "127.0.0.1"  # where the other nodes reach it (its namespace's, with --netns)

    @property
    def log_path(self) -> Path:
        """The broker's stdout and stderr (JSON log lines), appended across restarts."""
        return self.data_dir / "broker-console.log"

    @property
    def unique_model(self) -> str:
        """The model only this node has."""
        return f"only-{self.name}:latest"

    @property
    def up(self) -> bool:
        """Whether its broker process is running."""
        return self.process is not None and self.process.returncode is None

    @property
    def door(self) -> str:
        """The Ollama front door's base URL (it also speaks OpenAI's API)."""
        return self.front_doors["ollama"]

    def broker_argv(self) -> list[str]:
        """``python -m backend node`` for this node's data dir and ports, JSON logs."""
        argv = [sys.executable, "-m", "backend", "node", "--data-dir", str(self.data_dir)]
        for listener in ("node", "relay", *DOORS):
            argv += [f"--{listener}-port", str(self.ports[listener])]
        return [*argv, "--json-logs"]


async def call(
    node: SoakNode, method: Method[P, R], params: P | None = None, timeout: float = 10.0
) -> R:
    """One typed RPC call on a fresh control connection to ``node``'s broker."""
    async with connect(node.data_dir) as peer:
        return await contract.call(peer, method, params, timeout=timeout)


class Cluster:
    """Owns the three brokers under ``root`` (and through them their engines and workers);
    with ``network``, each node runs in a namespace of its own (``bench/_soak_netns.py``)."""

    def __init__(self, root: Path, network: SoakNetwork | None = None) -> None:
        self.root = root
        self.network = network
        taken: set[int] = set()
        listeners = ("node", "relay", *DOORS, "engine", "lmstudio-engine", "llamacpp-engine")
        self.nodes = [
            SoakNode(
                name,
                root / name,
                {listener: free_port(taken) for listener in listeners},
                (SHARED_MODEL, f"only-{name}:latest"),
            )
            for name in NODE_NAMES
        ]
        if network is not None:
            for node in self.nodes:
                node.address = network.addresses[node.name]

    def node(self, name: str) -> SoakNode:
        """The node called ``name``."""
        return next(node for node in self.nodes if node.name == name)

    async def start(self) -> None:
        """Prepare the data dirs, start the brokers and engines, pair and link the nodes, and
        return once every door routes every node's model."""
        for node in self.nodes:
            _prepare(node)
        await asyncio.gather(*(self.start_node(node, routable=False) for node in self.nodes))
        await self._pair()
        await self._link()
        await asyncio.gather(*(self.wait_routable(node) for node in self.nodes))

    async def stop(self) -> None:
        """Stop every broker this soak started, by PID (idempotent, bounded)."""
        await asyncio.gather(*(self.stop_node(node) for node in self.nodes))

    async def start_node(self, node: SoakNode, *, routable: bool = True) -> None:
        """Start ``node``'s broker (again), its engine, and wait until it serves."""
        environment = {
            "PAIR_DISCOVERY_MDNS": "0",  # a soak must not announce itself on the LAN
            "PAIR_KEYRING": "off",  # keys in files, never in this computer's keyring
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        with node.log_path.open("ab") as log:  # the child keeps its own descriptor
            node.process = await asyncio.create_subprocess_exec(
                *(self.network.prefix(node.name) if self.network else []),
                *node.broker_argv(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=child_env(environment),
                cwd=PROJECT_ROOT,
                start_new_session=True,  # Ctrl+C reaches the soak only, which stops it in order
                preexec_fn=child_preexec(),  # and the kernel kills it if the soak dies
            )
        node.starts += 1
        await self._wait_serving(node)
        await call(node, methods.ENGINE_START, EngineRef(engine=OLLAMA), ENGINE_START_TIMEOUT)
        status = await self.wait_doors(node)
        if self.network is not None:  # the doors let in their own host's loopback only
            doors = node.front_doors.items()
            node.front_doors = {
                d: await self.network.forward(node.name, _port(url)) for d, url in doors
            }
        node.node_id = status.node_id
        if routable:
            await self.wait_routable(node)

    async def stop_node(self, node: SoakNode) -> int | None:
        """SIGTERM ``node``'s broker (its own staged shutdown), SIGKILL after the grace."""
        process, node.process = node.process, None
        if process is None:
            return None
        return await stop_child(process, grace=BROKER_STOP_GRACE, close_stdin=False)

    async def status(self, node: SoakNode) -> BrokerStatus:
        """``status`` of ``node``'s broker."""
        return await call(node, methods.STATUS, NoParams())

    async def engine(self, node: SoakNode) -> EngineStatus:
        """``engine:status`` of ``node``'s Ollama."""
        return await call(node, methods.ENGINE_STATUS, EngineRef(engine=OLLAMA))

    async def worker_pid(self, node: SoakNode) -> int | None:
        """The proxy worker's PID while it runs."""
        status = await self.status(node)
        proxy = next((c for c in status.components if c.name == "proxy"), None)
        return proxy.pid if proxy is not None and proxy.status == "running" else None

    async def wait_doors(self, node: SoakNode, timeout: float = 30.0) -> BrokerStatus:
        """The broker's status once its front doors listen (their real ports are kept)."""
        async with asyncio.timeout(timeout):
            while True:
                status = await self.status(node)
                if "ollama" in status.front_doors:
                    node.front_doors = dict(status.front_doors)
                    return status
                await asyncio.sleep(0.2)

    async def wait_routable(self, node: SoakNode, timeout: float = ROUTABLE_TIMEOUT) -> None:
        """Until ``node``'s door answers for every node's own model and the others' doors
        answer for ``node``'s (discovery and the routing table have caught up)."""
        pairs = [(node, other.unique_model) for other in self.nodes if other.up]
        pairs += [(other, node.unique_model) for other in self.nodes if other.up]
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            for door_node, model in pairs:
                while not await _generates(session, door_node.door, model):
                    if time.monotonic() > deadline:
                        raise ClusterError(f"{door_node.name}'s door never routed {model}")
                    await asyncio.sleep(0.5)

    def kill(self, pid: int) -> None:
        """SIGKILL a process a broker of ours started (an engine or a proxy worker)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    async def _wait_serving(self, node: SoakNode) -> None:
        deadline = time.monotonic() + BROKER_START_TIMEOUT
        while time.monotonic() < deadline:
            if not node.up:
                raise ClusterError(f"{node.name}: the broker exited\n{tail(node.log_path)}")
            with contextlib.suppress(OSError, TimeoutError):
                await wait_broker_ready(node.data_dir, timeout=2)
                return
            await asyncio.sleep(0.1)
        raise ClusterError(f"{node.name}: the broker was not ready\n{tail(node.log_path)}")

    async def _pair(self) -> None:
        """Node ``a`` invites the others; each types the PIN it was shown."""
        inviter = self.nodes[0]
        for node in self.nodes[1:]:
            invite = InviteParams(address=node.address, port=node.ports["node"])
            await call(node, methods.CLUSTER_OPEN_JOIN_WINDOW, JoinWindowParams(), timeout=30)
            created = await call(inviter, methods.CLUSTER_INVITE, invite, timeout=30)
            if created.invite.state != "pending":
                raise ClusterError(f"{node.name}: not invited: {created.invite.reason}")
            answer = InviteAnswer(id=created.invite.id, pin=created.pin)
            ended = await call(node, methods.CLUSTER_ACCEPT, answer, timeout=30)
            if ended.state != "paired":
                raise ClusterError(f"{node.name}: not paired: {ended.reason or ended.state}")

    async def _link(self) -> None:
        """Every node knows the other two by address (no mDNS: the soak stays off the LAN)."""
        for node in self.nodes:
            for other in self.nodes:
                if other is not node:
                    added = ManualNodeAdd(address=other.address, port=other.ports["node"])
                    await call(node, methods.NODE_ADD, added)


def _port(url: str) -> int:
    """The port of a base URL (``http://host:port``)."""
    return int(url.rstrip("/").rpartition(":")[2])


async def _generates(session: aiohttp.ClientSession, door: str, model: str) -> bool:
    body = {"model": model, "prompt": "ready?", "stream": False, "options": {"num_predict": 2}}
    try:
        async with session.post(f"{door}/api/generate", json=body) as response:
            await response.read()
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


def _prepare(node: SoakNode) -> None:
    """The node's engine overrides: the Ollama emulator behind a shim; no other engine."""
    bin_dir = node.data_dir / "soak-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    extra = ["--models", ",".join(node.models), *EMULATOR_ARGS]
    text = OLLAMA_SHIM.replace("{python}", sys.executable)
    text = text.replace("{root!r}", repr(str(PROJECT_ROOT))).replace("{extra!r}", repr(extra))
    shim = bin_dir / "ollama"
    shim.write_text(text)
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    overrides: dict[str, dict[str, Any]] = {
        "ollama": {
            "detect": [{"path": str(shim)}],
            "models_dir": str(node.data_dir / "ollama-models"),
            "runtime": {
                "port": node.ports["engine"],
                "env": {"OLLAMA_NUM_PARALLEL": str(ENGINE_PARALLEL)},
                "ready": {"timeout_s": 30},
            },
        },
        # Engines this node does not have: nothing detected, a free port of their own, so the
        # node never adopts this computer's own LM Studio or llama-server.
        "lmstudio": {"detect": [], "runtime": {"port": node.ports["lmstudio-engine"]}},
        "llamacpp": {"detect": [], "runtime": {"port": node.ports["llamacpp-engine"]}},
    }
    folder = node.data_dir / "engines"
    folder.mkdir(parents=True, exist_ok=True)
    for engine, document in overrides.items():
        (folder / f"{engine}.json").write_text(json.dumps(document, indent=2))


def tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file ('' if unreadable)."""
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""
