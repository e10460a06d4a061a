"""The placement benchmark's emulated cluster: three nodes with their own speeds and slots.

Not run by hand (``bench/placement.py`` uses it). Each node is an Ollama emulator child
process (``pair emulate ollama --model-pace``) and a ``ProxyHost`` (the real proxy worker);
node A's front door is the one under test, B and C are its paired peers over mutual TLS. A's
table is refreshed every ``SAMPLE_S`` the way its broker would from node-info: each node's
resident models and slots, and a GPU utilisation sample (the emulator has no GPU, so the share
of its slots busy stands in for it: what the reference's pressure bands smooth).

Every process started here is stopped here, by its own PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import msgspec
from _common import Emulator, ProxyHost

from backend.protocol.proxy import GpuSample, PlacementPolicy, ProxyTargets, RouteTarget

MODEL = "chat"
SAMPLE_S = 2.0  # node-info telemetry every ~2 s
TIMEOUT_S = 900.0  # no request of the trace may fail over for waiting in a long queue


@dataclass(frozen=True)
class Shape:
    """One emulated node: its speed and slots for the model, load time, first-token delay."""

    node_id: str
    tokens_per_s: float
    slots: int
    load_s: float
    first_token_s: float
    warm: bool

    def scaled(self, speedup: float) -> Shape:
        """The same node ``speedup`` times faster in every figure."""
        return Shape(
            self.node_id,
            self.tokens_per_s * speedup,
            self.slots,
            self.load_s / speedup,
            self.first_token_s / speedup,
            self.warm,
        )


# Node A (the front door's own engine) is mid-speed; B is the fast one, not loaded at the
# start of each run; C is slow.
SHAPES = (
    Shape("node-a", 30.0, 2, 4.0, 0.15, warm=True),
    Shape("node-b", 60.0, 4, 5.0, 0.10, warm=False),
    Shape("node-c", 12.0, 1, 8.0, 0.30, warm=True),
)


def node_emulator(shape: Shape, log_path: Path) -> Emulator:
    """The Ollama emulator with the model at the node's own figures."""
    pace = f"{MODEL}={shape.tokens_per_s}:{shape.slots}:{shape.load_s}:{shape.first_token_s}"
    options = [
        *("--models", MODEL, "--model-pace", pace, "--reply-tokens", "100000"),
        *("--prompt-token-delay", "0", "--keep-alive", "3600"),
    ]
    return Emulator(options, log_path)


class Cluster:
    """Three nodes; ``front`` is node A's proxy (restarted per run, so nothing carries over)."""

    def __init__(self, shapes: tuple[Shape, ...], logs: Path) -> None:
        self.shapes = shapes
        self.logs = logs
        self.emulators: list[Emulator] = []
        self.peers: dict[str, ProxyHost] = {}
        self.front: ProxyHost | None = None
        self.policy: PlacementPolicy = "pair"

    def start(self) -> None:
        """The emulators and the peers' proxies (each trusting node A)."""
        for shape in self.shapes:
            self.emulators.append(node_emulator(shape, self.logs / f"{shape.node_id}-engine.log"))
        for shape in self.shapes[1:]:
            self.peers[shape.node_id] = ProxyHost(
                ProxyTargets(node_id=shape.node_id),
                log_path=self.logs / f"{shape.node_id}-proxy.log",
                node_id=shape.node_id,
            )
        self.front = ProxyHost(
            ProxyTargets(node_id=self.shapes[0].node_id),
            log_path=self.logs / "node-a-proxy.log",
            node_id=self.shapes[0].node_id,
        )
        for shape in self.shapes[1:]:
            self._trust_front(shape)

    def stop(self) -> None:
        """Stop every process started, last first."""
        for host in [self.front, *self.peers.values()]:
            if host is not None:
                host.stop()
        for emulator in reversed(self.emulators):
            emulator.stop()

    def door(self) -> str:
        """Node A's Ollama front door."""
        assert self.front is not None
        return self.front.doors["ollama"]

    async def reset(self, policy: PlacementPolicy) -> None:
        """Every run starts alike: warm nodes loaded, the cold one not, node A's proxy new."""
        async with aiohttp.ClientSession() as session:
            for shape, emulator in zip(self.shapes, self.emulators, strict=True):
                body = {"model": MODEL, "keep_alive": 3600 if shape.warm else 0}
                async with session.post(f"{emulator.url}/api/generate", json=body) as answer:
                    await answer.read()
        assert self.front is not None
        await asyncio.to_thread(self.front.stop)
        self.front = await asyncio.to_thread(
            ProxyHost,
            ProxyTargets(node_id=self.shapes[0].node_id),
            log_path=self.logs / "node-a-proxy.log",
            node_id=self.shapes[0].node_id,
        )
        for shape in self.shapes[1:]:  # the new proxy has a new certificate
            await asyncio.to_thread(self._trust_front, shape)
        self.policy = policy
        await self.refresh()

    def _trust_front(self, shape: Shape) -> None:
        assert self.front is not None
        emulator = self.emulators[self.shapes.index(shape)]
        self.peers[shape.node_id].update(
            ProxyTargets(
                node_id=shape.node_id,
                engines={"ollama": [self._local(shape, emulator, [MODEL])]},
                trusted=[self.front.cert_der],
                header_timeout_s=TIMEOUT_S,
                first_content_timeout_s=TIMEOUT_S,
            )
        )

    async def refresh(self) -> None:
        """Send node A a table with what node-info would say now (resident models, GPU)."""
        states = await self._states()
        now = time.time()
        owners: list[RouteTarget] = []
        gpu: dict[str, GpuSample] = {}
        for index, (shape, emulator) in enumerate(zip(self.shapes, self.emulators, strict=True)):
            runners = states[index].get("loaded", [])
            resident = [MODEL] if any(r["name"].startswith(MODEL) for r in runners) else []
            busy = sum(r["active"] for r in runners)
            gpu[shape.node_id] = GpuSample(percent=100.0 * busy / shape.slots, sampled_at=now)
            if index == 0:
                owners.append(self._local(shape, emulator, resident))
            else:
                peer = self.peers[shape.node_id]
                owners.append(
                    RouteTarget(
                        node_id=shape.node_id,
                        kind="peer",
                        base_url=peer.relay_url,
                        models=[MODEL],
                        cert_der=peer.cert_der,
                        slots=shape.slots,
                        resident=resident,
                        resident_known=True,
                    )
                )
        table = ProxyTargets(
            node_id=self.shapes[0].node_id,
            engines={"ollama": owners},
            trusted=[host.cert_der for host in self.peers.values()],
            header_timeout_s=TIMEOUT_S,
            first_content_timeout_s=TIMEOUT_S,
            placement=self.policy,
            gpu=gpu,
        )
        assert self.front is not None
        await asyncio.to_thread(self.front.update, table)

    async def sample_until(self, done: asyncio.Event) -> None:
        """Refresh node A's table every ``SAMPLE_S`` until ``done``."""
        while not done.is_set():
            await self.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), SAMPLE_S)

    async def served(self) -> dict[str, int]:
        """Requests each node's engine completed so far."""
        states = await self._states()
        return {
            shape.node_id: int(state.get("completed", 0))
            for shape, state in zip(self.shapes, states, strict=True)
        }

    async def _states(self) -> list[dict[str, object]]:
        async with aiohttp.ClientSession() as session:
            found = []
            for emulator in self.emulators:
                async with session.get(f"{emulator.url}/_emulator/state") as answer:
                    found.append(msgspec.json.decode(await answer.read()))
            return found

    @staticmethod
    def _local(shape: Shape, emulator: Emulator, resident: list[str]) -> RouteTarget:
        return RouteTarget(
            node_id=shape.node_id,
            kind="local",
            base_url=emulator.url,
            models=[MODEL],
            slots=shape.slots,
            resident=resident,
            resident_known=True,
        )
