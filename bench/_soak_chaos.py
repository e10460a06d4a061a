"""The soak's chaos: every so often an engine or a proxy worker killed, a node restarted, or
(when the nodes run in namespaces) a node's link broken for a few seconds.

Not a benchmark itself; ``bench/soak.py`` drives it. What the product does after each is what
is checked: an engine PAIR started and that crashed is restarted by its broker while it is
wanted (the soak never restarts it), a proxy worker killed with SIGKILL is restarted by its
broker, and a node stopped (SIGTERM: its own staged shutdown) and started again on the same
data dir and ports comes back paired and routable. Node ``a`` is never stopped, so one broker
runs for the whole soak and its resource series has no restart in it. A broken link is a
blackhole route from the node towards another (its packets reach the node, nothing comes back)
or the node's link set down, for 3-8 s; once mended, the node must be routable again.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, Literal

import aiohttp

from backend.protocol import errors
from bench._soak_cluster import Cluster, ClusterError, SoakNode
from tests.support.netfaults import LinkFailed

Action = Literal["engine", "worker", "node", "link"]
ACTIONS: Final[tuple[Action, ...]] = ("engine", "worker", "node")
LINK_HELD_S: Final = (3.0, 8.0)
RECOVERY_TIMEOUT: Final = 90.0
NEVER_STOPPED: Final = "a"


@dataclass
class ChaosEvent:
    """One act of chaos: when (seconds into the soak), what, where, and how it ended."""

    at: float
    action: Action
    node: str
    detail: str = ""
    recovered_s: float | None = None
    routable_s: float | None = None
    failure: str | None = None


@dataclass
class Chaos:
    """Acts on ``cluster`` every ``every`` seconds (a random span), until ``stop()``.

    ``down`` names the nodes it has stopped and not yet brought back (the traffic leaves their
    doors alone, as a user would know their computer is restarting).
    """

    cluster: Cluster
    every: tuple[float, float]
    rng: random.Random
    began: float = field(default_factory=time.monotonic)
    events: list[ChaosEvent] = field(default_factory=list)
    down: set[str] = field(default_factory=set)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def stop(self) -> None:
        """Start no more chaos (the act under way finishes, recovery included)."""
        self._stopping.set()

    async def run(self) -> None:
        """Act, wait for the product to recover, repeat, until ``stop()``."""
        last: tuple[Action, str] | None = None
        while not await self._sleep(self.rng.uniform(*self.every)):
            action, node = self._choose(last)
            last = (action, node.name)
            event = ChaosEvent(round(time.monotonic() - self.began, 1), action, node.name)
            self.events.append(event)
            acts: dict[Action, Callable[[SoakNode, ChaosEvent], Awaitable[None]]] = {
                "engine": self._kill_engine,
                "worker": self._kill_worker,
                "node": self._restart_node,
                "link": self._break_link,
            }
            try:
                await acts[action](node, event)
            except (ClusterError, TimeoutError, OSError, errors.RpcError, LinkFailed) as exc:
                event.failure = event.failure or f"{type(exc).__name__}: {exc}"[:300]

    def _choose(self, last: tuple[Action, str] | None) -> tuple[Action, SoakNode]:
        """A random act on a random node that is up, never the same twice in a row."""
        actions = ACTIONS if self.cluster.network is None else (*ACTIONS, "link")
        while True:
            action = self.rng.choice(actions)
            candidates = [n for n in self.cluster.nodes if n.up]
            if action == "node":
                candidates = [n for n in candidates if n.name != NEVER_STOPPED]
            if candidates:
                node = self.rng.choice(candidates)
                if (action, node.name) != last:
                    return action, node

    async def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; True if ``stop()`` came first."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stopping.wait()
        return self._stopping.is_set()

    async def _kill_engine(self, node: SoakNode, event: ChaosEvent) -> None:
        before = await self.cluster.engine(node)
        if before.pid is None:
            event.failure = f"no engine process to kill (state {before.state})"
            return
        self.cluster.kill(before.pid)
        killed = time.monotonic()
        event.detail = f"engine pid {before.pid} SIGKILL"
        async with asyncio.timeout(RECOVERY_TIMEOUT):
            while True:
                now = await self.cluster.engine(node)
                if now.state == "running" and now.pid not in (None, before.pid):
                    break
                await asyncio.sleep(0.2)
        event.recovered_s = round(time.monotonic() - killed, 1)
        event.detail += f", restarted by PAIR as pid {now.pid}"
        await self.cluster.wait_routable(node, RECOVERY_TIMEOUT)
        event.routable_s = round(time.monotonic() - killed, 1)

    async def _kill_worker(self, node: SoakNode, event: ChaosEvent) -> None:
        old = await self.cluster.worker_pid(node)
        if old is None:
            event.failure = "no proxy worker running to kill"
            return
        self.cluster.kill(old)
        killed = time.monotonic()
        event.detail = f"proxy worker pid {old} SIGKILL"
        async with asyncio.timeout(RECOVERY_TIMEOUT):
            new = await self._new_worker(node, old)
            await _door_answers(node)
        event.recovered_s = round(time.monotonic() - killed, 1)
        event.detail += f", restarted by the broker as pid {new}"
        await self.cluster.wait_routable(node, RECOVERY_TIMEOUT)
        event.routable_s = round(time.monotonic() - killed, 1)

    async def _new_worker(self, node: SoakNode, old: int) -> int:
        """The PID of the worker the broker started after ``old``, once it runs."""
        while True:
            new = await self.cluster.worker_pid(node)
            if new not in (None, old):
                assert new is not None
                return new
            await asyncio.sleep(0.1)

    async def _restart_node(self, node: SoakNode, event: ChaosEvent) -> None:
        self.down.add(node.name)
        try:
            pid = node.process.pid if node.process is not None else None
            code = await self.cluster.stop_node(node)
            event.detail = f"broker pid {pid} SIGTERM, exit {code}"
            if code != 0:
                event.failure = f"the broker's own shutdown exited {code}"
            await asyncio.sleep(self.rng.uniform(2, 6))
            started = time.monotonic()
            async with asyncio.timeout(RECOVERY_TIMEOUT):
                await self.cluster.start_node(node, routable=False)
            event.recovered_s = round(time.monotonic() - started, 1)
        finally:
            self.down.discard(node.name)
        await self.cluster.wait_routable(node, RECOVERY_TIMEOUT)
        event.routable_s = round(time.monotonic() - started, 1)
        event.detail += f", started again as pid {node.process.pid if node.process else '?'}"

    async def _break_link(self, node: SoakNode, event: ChaosEvent) -> None:
        network = self.cluster.network
        assert network is not None
        others = [other for other in self.cluster.nodes if other is not node and other.up]
        namespace = network.namespaces[node.name]
        if others and self.rng.random() < 0.5:
            towards = self.rng.choice(others).address
            fault = await asyncio.to_thread(network.faults.blackhole, namespace, towards)
        else:
            fault = await asyncio.to_thread(network.faults.link_down, namespace)
        held = self.rng.uniform(*LINK_HELD_S)
        event.detail = f"{fault.description} for {held:.1f} s"
        await asyncio.sleep(held)
        await asyncio.to_thread(network.faults.restore, fault)
        mended = time.monotonic()
        await self.cluster.wait_routable(node, RECOVERY_TIMEOUT)
        event.recovered_s = event.routable_s = round(time.monotonic() - mended, 1)


async def _door_answers(node: SoakNode) -> None:
    """Until the node's Ollama door answers ``/api/version``."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(f"{node.door}/api/version") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.1)
