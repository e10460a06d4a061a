"""The host side of a spread model: plans each launch of llama.cpp, opens the RPC tunnels its
plan needs, and re-plans when a member it spreads over is lost.

At every launch (``SpreadHost.shape``, the engine run's launch shaper) the model's size and
layer count are read from its file, this computer's and the reachable members' free memory from
telemetry, and the planner (``plan.py``) says where the layers go. A model this computer holds
alone runs here, with GPU offload sized to its free VRAM; one it cannot hold (or one the user
asked to spread) gets a ``TunnelListener`` per lending member and ``--rpc`` pointing at them.

A member of the running spread that leaves, is removed, or whose link drops marks the spread
degraded with the reason; its tunnel is cut at once, so requests in flight end with an error
instead of waiting, and the engine is restarted, which plans again over the members left (or
fails saying why they cannot hold it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import msgspec

from backend.common.gguf import GgufError, read_file
from backend.common.tasks import TaskSet
from backend.components.cluster.members import Member
from backend.components.engines.accel import offload_layers
from backend.components.engines.shaping import LaunchExtras
from backend.components.split.members import Candidate, has_memory_figures
from backend.components.split.model_shape import layer_count
from backend.components.split.plan import (
    DEFAULT_CONTEXT_BYTES,
    SplitPlan,
    SplitRefused,
    plan_needs_split,
    plan_split,
)
from backend.components.split.tunnel_listener import Dial, TunnelListener
from backend.protocol import errors
from backend.protocol.types.base import NodeId
from backend.protocol.types.engines import SpreadShare, SpreadStatus

log = logging.getLogger(__name__)

# CUDA numbers GPUs fastest first unless told otherwise; the plan follows NVML's (bus) order.
SPREAD_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
# A re-plan's launch can fail for a moment: a member's rpc-server is still ending the lost
# spread's connection when the new llama-server says hello. Tried again after these waits.
REPLAN_WAITS_S = (0.0, 1.0, 3.0)


class Peer(msgspec.Struct, frozen=True):
    """A trusted member as a spread sees it: whether its link is up, and its free memory."""

    member: Member
    reachable: bool
    candidate: Candidate


class _Intent(msgspec.Struct, frozen=True):
    """What the user asked for: the model, and the members named (None: PAIR decides)."""

    model: str
    across: tuple[str, ...] | None


class SpreadHost:
    """Shapes llama.cpp's launches on this computer; owns the tunnel listeners of the spread it
    runs and the task that restarts the engine when a member of it is lost."""

    def __init__(
        self,
        *,
        host: Callable[[], Candidate],
        peers: Callable[[], Sequence[Peer]],
        dial: Dial,
        context_bytes: int = DEFAULT_CONTEXT_BYTES,
        replan_waits: Sequence[float] = REPLAN_WAITS_S,
    ) -> None:
        self._host = host
        self._peers = peers
        self._dial = dial
        self._context_bytes = context_bytes
        self._replan_waits = tuple(replan_waits)
        self._listeners: dict[NodeId, TunnelListener] = {}
        self._plan: SplitPlan | None = None
        self._status: SpreadStatus | None = None
        self._intent: _Intent | None = None
        self._lost = ""  # why the spread is degraded; empty while it runs as planned
        self._replanning = False  # a member was lost and the engine restarts without it
        self._replan: Callable[[], Awaitable[object]] | None = None
        self._tasks = TaskSet("split:host")

    def bind_replan(self, replan: Callable[[], Awaitable[object]]) -> None:
        """What restarts the engine (and so plans again) when a member of the spread is lost."""
        self._replan = replan

    def spread(self) -> SpreadStatus | None:
        """The spread running (or last run, when degraded); None for a model run here alone."""
        return self._status

    async def shape(self, model: str, path: Path, across: tuple[str, ...] | None) -> LaunchExtras:
        """Plan this launch of ``model``; ``across`` names the members to spread it over."""
        intent = _Intent(model, across)
        if intent != self._intent:
            self._intent, self._lost = intent, ""
        self._replanning = False
        await self._close_listeners()
        size, layers = await asyncio.to_thread(_model_figures, path)
        host = self._host()
        if across is not None and not across:
            return self._alone(host, size, layers)
        if across is None and not self._needs_spreading(host, size):
            return self._alone(host, size, layers)
        if isinstance(layers, str):
            raise errors.InvalidParams(f"{path.name} cannot be spread: {layers}", {"model": model})
        peers = self._chosen_peers(across)
        planned = plan_split(
            size,
            layers,
            [host, *(peer.candidate for peer in peers)],
            host.node_id,
            context_bytes=self._context_bytes,
            every_member=across is not None,
        )
        if isinstance(planned, SplitRefused):
            raise self._refused(model, planned.why)
        if not planned.rpc_members:
            return self._alone(host, size, layers)
        return await self._spread(model, planned, {p.member.node_id: p.member for p in peers})

    async def released(self, *, crashed: bool) -> None:
        """llama-server is gone: close the tunnels; a crash leaves the spread shown degraded."""
        await self._close_listeners()
        if self._status is None:
            return
        if crashed:
            reason = self._lost or "llama.cpp stopped unexpectedly; PAIR plans the spread again"
            self._status = _degraded(self._status, reason)
        elif not self._lost:
            self._status, self._plan = None, None

    def members_changed(self) -> None:
        """Trust or presence changed: a lost member of the running spread triggers a re-plan."""
        if self._plan is None or self._replanning:
            return
        peers = {peer.member.node_id: peer for peer in self._peers()}
        for node_id in self._plan.rpc_members:
            peer = peers.get(node_id)
            if peer is None or not peer.reachable:
                self._member_lost(node_id, "left the cluster" if peer is None else "went away")
                return

    async def close(self) -> None:
        """Close every tunnel listener and stop the re-plan task (idempotent)."""
        await self._tasks.close(timeout=2.0)
        await self._close_listeners()

    # -- planning ------------------------------------------------------------------------------

    def _alone(self, host: Candidate, size: int, layers: int | str) -> LaunchExtras:
        self._status, self._plan = None, None
        vram = [gpu.vram_free_bytes for gpu in host.gpus if gpu.vram_free_bytes is not None]
        if not vram or isinstance(layers, str):
            return LaunchExtras()  # no VRAM figures or layers: llama.cpp's default (Metal, CPU)
        return LaunchExtras(("-ngl", str(offload_layers(sum(vram), size, layers))), SPREAD_ENV)

    def _needs_spreading(self, host: Candidate, size: int) -> bool:
        # Before this computer's first telemetry sample (a start right after the broker's)
        # nothing says it cannot hold the model: llama.cpp is left to judge.
        if not has_memory_figures(host):
            return False
        return plan_needs_split(size, [host], context_bytes=self._context_bytes)

    def _chosen_peers(self, across: tuple[str, ...] | None) -> list[Peer]:
        reachable = [peer for peer in self._peers() if peer.reachable]
        if across is None:
            return reachable
        chosen: list[Peer] = []
        host = self._host()
        for wanted in across:
            if wanted in (host.node_id, host.name):
                continue  # the host always takes part
            peer = _find(self._peers(), wanted)
            if peer is None:
                raise errors.NotFound(
                    f"{wanted} is not a member of this cluster",
                    {"member": wanted, "action": "pair members"},
                )
            if peer in chosen:
                continue
            if not peer.reachable:
                if self._lost:
                    continue  # re-planning without the member that was lost
                raise errors.Unavailable(
                    f"{peer.member.name} cannot be reached now, so the model cannot be "
                    "spread over it",
                    {"member": peer.member.name},
                )
            chosen.append(peer)
        return chosen

    async def _spread(
        self, model: str, plan: SplitPlan, members: dict[NodeId, Member]
    ) -> LaunchExtras:
        endpoints: list[str] = []
        for node_id in plan.rpc_members:
            listener = TunnelListener(members[node_id], self._dial)
            self._listeners[node_id] = listener
            endpoints.append(f"127.0.0.1:{await listener.start()}")
        self._plan = plan
        reason = f"{self._lost}; planned again: {plan.reason}" if self._lost else plan.reason
        self._status = SpreadStatus(
            model=model,
            state="degraded" if self._lost else "running",
            shares=_shares(plan),
            reason=reason,
        )
        log.info("spreading %s: %s", model, plan.reason)
        args = ("--rpc", ",".join(endpoints), "--tensor-split", plan.tensor_split_arg())
        return LaunchExtras((*args, "-ngl", str(plan.gpu_layers)), SPREAD_ENV)

    def _refused(self, model: str, why: str) -> errors.RpcError:
        if self._lost and self._status is not None:
            reason = f"{self._lost}; the members left cannot hold it: {why}"
            self._status = _degraded(self._status, reason)
            return errors.Conflict(f"{model} cannot run: {reason}", {"model": model})
        return errors.Conflict(f"{model} cannot be spread: {why}", {"model": model})

    # -- losing a member -----------------------------------------------------------------------

    def _member_lost(self, node_id: NodeId, what: str) -> None:
        assert self._status is not None, "a plan always has a status"
        name = next((s.name for s in self._status.shares if s.node == node_id), str(node_id))
        self._lost = f"{name} {what}"
        self._replanning = True
        self._status = _degraded(self._status, f"{self._lost}; PAIR plans the spread again")
        log.warning("spread of %s: %s; planning again", self._status.model, self._lost)
        listener = self._listeners.pop(node_id, None)
        self._tasks.spawn(self._replan_after_loss(listener), name="replan")

    async def _replan_after_loss(self, listener: TunnelListener | None) -> None:
        if listener is not None:
            await listener.close()  # llama-server's requests through it end now, not later
        if self._replan is None:
            return
        for attempt, wait in enumerate(self._replan_waits, start=1):
            await asyncio.sleep(wait)
            try:
                await self._replan()
                return
            except errors.RpcError as exc:
                log.warning("planning the spread again failed (try %d): %s", attempt, exc)

    async def _close_listeners(self) -> None:
        listeners, self._listeners = list(self._listeners.values()), {}
        for listener in listeners:
            await listener.close()


def _model_figures(path: Path) -> tuple[int, int | str]:
    """The file's size, and its layer count or why the header does not give one."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise errors.NotFound(f"{path.name} cannot be read: {exc.strerror}") from exc
    try:
        return size, layer_count(read_file(path))
    except (OSError, ValueError, GgufError) as exc:
        return size, str(exc)


def _find(peers: Sequence[Peer], wanted: str) -> Peer | None:
    for peer in peers:
        if wanted in (peer.member.name, peer.member.node_id):
            return peer
    return None


def _shares(plan: SplitPlan) -> list[SpreadShare]:
    return [
        SpreadShare(
            node=share.node_id,
            name=share.label,
            layers=share.layers,
            bytes=share.share_bytes,
            memory=share.memory,
            host=share.node_id == plan.host,
        )
        for share in plan.shares
    ]


def _degraded(status: SpreadStatus, reason: str) -> SpreadStatus:
    return SpreadStatus(model=status.model, state="degraded", shares=status.shares, reason=reason)
