"""The replica benchmark's emulated cluster: three nodes, three models, per-model load times.

Not run by hand (``bench/replicas.py`` uses it). Built like ``_placement_cluster.py``: each node
is an Ollama emulator child process with every model on disk, each at the node's own pace and
load time (``--model-pace``), and a ``ProxyHost`` (the real proxy worker); node A's front door
is the one measured, B and C are its paired peers over mutual TLS. A's table is refreshed every
``SAMPLE_S`` from the emulators' state the way its broker would from node-info.

With replicas on, ``_replicas_standin.py`` drives the real planner against this cluster.
Every process started here is stopped here, by its own PID.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp
import msgspec
from _common import Emulator, ProxyHost
from _replicas_trace import HOT, STEADY

from backend.protocol.proxy import ProxyTargets, RouteTarget

MODELS = (HOT, *STEADY)
# What node A routes a model to: every node with it on disk (placement may load it there, as
# PAIR does today) or only the nodes with it loaded (static: only the planner adds replicas).
Routes = Literal["on-disk", "resident"]
SAMPLE_S = 2.0  # node-info telemetry every ~2 s
TIMEOUT_S = 900.0  # no request may fail over for waiting in a long queue
KEEP_S = 3600  # what is loaded stays loaded for the whole run


@dataclass(frozen=True)
class Pace:
    """One model on one node: tokens/s, slots, load time, first-token delay, loaded at start."""

    tokens_per_s: float
    slots: int
    load_s: float
    first_token_s: float
    warm: bool


@dataclass(frozen=True)
class NodeShape:
    """One emulated node and its models' paces."""

    node_id: str
    paces: Mapping[str, Pace]

    def scaled(self, speedup: float) -> NodeShape:
        return NodeShape(
            self.node_id,
            {
                model: Pace(
                    p.tokens_per_s * speedup,
                    p.slots,
                    p.load_s / speedup,
                    p.first_token_s / speedup,
                    p.warm,
                )
                for model, p in self.paces.items()
            },
        )


# The hot model is loaded only on node A at the start; B (fast) and C have it on disk.
SHAPES = (
    NodeShape(
        "node-a",
        {
            HOT: Pace(30, 2, 4, 0.15, True),
            "chat": Pace(30, 2, 4, 0.15, True),
            "notes": Pace(30, 2, 4, 0.15, False),
        },
    ),
    NodeShape(
        "node-b",
        {
            HOT: Pace(60, 4, 6, 0.10, False),
            "chat": Pace(60, 4, 6, 0.10, False),
            "notes": Pace(60, 4, 6, 0.10, True),
        },
    ),
    NodeShape(
        "node-c",
        {
            HOT: Pace(40, 2, 8, 0.20, False),
            "chat": Pace(40, 2, 8, 0.20, True),
            "notes": Pace(40, 2, 8, 0.20, False),
        },
    ),
)


def base_name(name: str) -> str:
    """The emulator's name for a model without Ollama's default tag."""
    return name.removesuffix(":latest")


def node_emulator(shape: NodeShape, log_path: Path) -> Emulator:
    """The Ollama emulator with every model on disk at the node's own figures."""
    paces = [
        f"{model}={p.tokens_per_s}:{p.slots}:{p.load_s}:{p.first_token_s}"
        for model, p in shape.paces.items()
    ]
    options = [
        *("--models", ",".join(MODELS), "--reply-tokens", "100000"),
        *(option for pace in paces for option in ("--model-pace", pace)),
        *("--prompt-token-delay", "0", "--keep-alive", str(KEEP_S)),
    ]
    return Emulator(options, log_path)


class Cluster:
    """Three nodes; ``front`` is node A's proxy. ``reset`` puts the models back as at start."""

    def __init__(
        self, shapes: tuple[NodeShape, ...], logs: Path, routes: Routes = "on-disk"
    ) -> None:
        self.shapes = shapes
        self.logs = logs
        self.routes = routes
        self.emulators: list[Emulator] = []
        self.peers: dict[str, ProxyHost] = {}
        self.front: ProxyHost | None = None

    def start(self) -> None:
        """The emulators and the proxies (the peers trusting node A)."""
        for shape in self.shapes:
            self.emulators.append(node_emulator(shape, self.logs / f"{shape.node_id}-engine.log"))
        for shape in self.shapes[1:]:
            self.peers[shape.node_id] = ProxyHost(
                ProxyTargets(node_id=shape.node_id),
                log_path=self.logs / f"{shape.node_id}-proxy.log",
                node_id=shape.node_id,
            )
        self.front = self._new_front()
        self._trust_front()

    def _new_front(self) -> ProxyHost:
        return ProxyHost(
            ProxyTargets(node_id=self.shapes[0].node_id),
            log_path=self.logs / "node-a-proxy.log",
            node_id=self.shapes[0].node_id,
        )

    def _trust_front(self) -> None:
        """The peers' tables: their own engine, trusting node A's (new) certificate."""
        assert self.front is not None
        for shape, emulator in zip(self.shapes[1:], self.emulators[1:], strict=True):
            self.peers[shape.node_id].update(
                ProxyTargets(
                    node_id=shape.node_id,
                    engines={"ollama": [self._local(shape, emulator, list(MODELS))]},
                    trusted=[self.front.cert_der],
                    header_timeout_s=TIMEOUT_S,
                    first_content_timeout_s=TIMEOUT_S,
                )
            )

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

    async def reset(self) -> None:
        """Every run starts alike: each node's warm models loaded, the others not, and node A's
        proxy new (so no run inherits another's measurements of the nodes)."""
        async with aiohttp.ClientSession() as session:
            for shape, emulator in zip(self.shapes, self.emulators, strict=True):
                for model, pace in shape.paces.items():
                    await load(session, emulator.url, model, KEEP_S if pace.warm else 0)
        if self.front is not None:
            await asyncio.to_thread(self.front.stop)
        self.front = await asyncio.to_thread(self._new_front)
        await asyncio.to_thread(self._trust_front)
        await self.refresh()

    async def refresh(self) -> None:
        """Send node A a table with what node-info would say now (the resident models)."""
        states = await self.states()
        owners: list[RouteTarget] = []
        for index, (shape, emulator) in enumerate(zip(self.shapes, self.emulators, strict=True)):
            resident = sorted(resident_models(states[index]))
            if index == 0:
                owners.append(self._local(shape, emulator, resident, self._served(resident)))
                continue
            peer = self.peers[shape.node_id]
            owners.append(
                RouteTarget(
                    node_id=shape.node_id,
                    kind="peer",
                    base_url=peer.relay_url,
                    models=self._served(resident),
                    cert_der=peer.cert_der,
                    slots=max(p.slots for p in shape.paces.values()),
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
            placement="pair",
        )
        assert self.front is not None
        await asyncio.to_thread(self.front.update, table)

    async def states(self) -> list[dict[str, Any]]:
        """Each emulator's ``/_emulator/state``."""
        async with aiohttp.ClientSession() as session:
            found = []
            for emulator in self.emulators:
                async with session.get(f"{emulator.url}/_emulator/state") as answer:
                    found.append(msgspec.json.decode(await answer.read()))
            return found

    async def started(self) -> dict[str, list[tuple[str, float]]]:
        """Per node, (model, started_at) of the requests its engine ran (the last 500)."""
        states = await self.states()
        return {
            shape.node_id: [
                (base_name(r["model"]), float(r["started_at"]))
                for r in state.get("finished", [])
                if r.get("started_at") is not None
            ]
            for shape, state in zip(self.shapes, states, strict=True)
        }

    def _served(self, resident: list[str]) -> list[str]:
        """The models node A's table lists for a node: all it has on disk, or with ``resident``
        routes only what it has loaded (static placement: no load by routing)."""
        return list(MODELS) if self.routes == "on-disk" else resident

    @staticmethod
    def _local(
        shape: NodeShape, emulator: Emulator, resident: list[str], models: list[str] | None = None
    ) -> RouteTarget:
        return RouteTarget(
            node_id=shape.node_id,
            kind="local",
            base_url=emulator.url,
            models=list(MODELS) if models is None else models,
            slots=max(p.slots for p in shape.paces.values()),
            resident=resident,
            resident_known=True,
        )


def resident_models(state: Mapping[str, Any]) -> set[str]:
    """The models an emulator has loaded now."""
    return {base_name(runner["name"]) for runner in state.get("loaded", [])}


async def load(session: aiohttp.ClientSession, url: str, model: str, keep_s: int) -> None:
    """Ollama's load (or unload, ``keep_s`` 0): a generate request with no prompt."""
    async with session.post(
        f"{url}/api/generate", json={"model": model, "keep_alive": keep_s}
    ) as answer:
        await answer.read()
