"""The members a model may be spread over, as the planner sees them: free memory per device.

A member's devices are what llama.cpp will see on it: its GPUs when it reports VRAM for any
(``rpc-server`` exposes the accelerators, not the CPU), else one device backed by its free RAM
(the CPU, or a unified-memory GPU that reports no VRAM of its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from backend.protocol.types.base import NodeId
from backend.protocol.types.nodes import NodeGpu, NodeInfo

MemoryKind = Literal["vram", "ram"]
HEADROOM_PERCENT = 10  # of each device's free memory, left for the KV cache, buffers, the OS


class MemberGpu(msgspec.Struct, frozen=True):
    """One GPU of a member; ``vram_free_bytes`` is None when the GPU reports no VRAM figures."""

    name: str
    vram_free_bytes: int | None


class Candidate(msgspec.Struct, frozen=True):
    """A member the model may be spread over: its free RAM and its GPUs, in the engine's order."""

    node_id: NodeId
    ram_free_bytes: int | None
    gpus: tuple[MemberGpu, ...] = ()
    name: str = ""  # what messages call the member; its node id when empty

    @property
    def label(self) -> str:
        """The member's name for people: its name, else its node id."""
        return self.name or self.node_id


class Device(msgspec.Struct, frozen=True):
    """One device llama.cpp sees on a member, and the bytes the plan may fill on it."""

    name: str
    kind: MemoryKind
    free_bytes: int
    usable_bytes: int


def candidate_from_node_info(info: NodeInfo) -> Candidate:
    """A candidate from a member's node-info: free = total - used, unknown stays None."""
    memory = info.memory
    return candidate_from_figures(
        info.node_id, info.name, memory.total_bytes, memory.used_bytes, info.gpus
    )


def candidate_from_figures(
    node_id: NodeId,
    name: str,
    ram_total: int | None,
    ram_used: int | None,
    gpus: Sequence[NodeGpu],
) -> Candidate:
    """A candidate from memory readings (node-info's or discovery's telemetry)."""
    lent = tuple(
        MemberGpu(gpu.name or gpu.vendor, _free(gpu.vram_total_bytes, gpu.vram_used_bytes))
        for gpu in gpus
    )
    return Candidate(node_id, _free(ram_total, ram_used), lent, name)


def has_memory_figures(candidate: Candidate) -> bool:
    """Whether the member reports free RAM or free VRAM on at least one GPU."""
    return candidate.ram_free_bytes is not None or _reports_vram(candidate)


def devices(candidate: Candidate, *, reserved_bytes: int = 0) -> tuple[Device, ...]:
    """The member's devices with their usable bytes: free less the headroom, and on the first
    device less ``reserved_bytes`` too (the host's context), spilling to the next ones."""
    if _reports_vram(candidate):
        raw = [(gpu.name, "vram", gpu.vram_free_bytes or 0) for gpu in candidate.gpus]
    else:
        raw = [("RAM", "ram", candidate.ram_free_bytes or 0)]
    found: list[Device] = []
    for name, kind, free in raw:
        usable = max(free - free * HEADROOM_PERCENT // 100, 0)
        taken = min(usable, reserved_bytes)
        reserved_bytes -= taken
        found.append(Device(name, "vram" if kind == "vram" else "ram", free, usable - taken))
    return tuple(found)


def whole_capacity(candidate: Candidate, reserved_bytes: int) -> int:
    """The most one member can hold alone as the host: its VRAM or its RAM, whichever is more."""
    ram = candidate.ram_free_bytes or 0
    vram = sum(gpu.vram_free_bytes or 0 for gpu in candidate.gpus)
    best = max(ram, vram)
    return max(best - best * HEADROOM_PERCENT // 100 - reserved_bytes, 0)


def check_candidates(candidates: Sequence[Candidate], host: NodeId) -> None:
    """Raises ``ValueError`` for input no plan can be made of (a programming error)."""
    ids = [candidate.node_id for candidate in candidates]
    if len(set(ids)) != len(ids):
        raise ValueError("a member appears twice among the candidates")
    if host not in ids:
        raise ValueError(f"the host {host} is not among the candidates")
    for candidate in candidates:
        figures = [candidate.ram_free_bytes, *(gpu.vram_free_bytes for gpu in candidate.gpus)]
        if any(value is not None and value < 0 for value in figures):
            raise ValueError(f"the member {candidate.node_id} reports negative free memory")


def _reports_vram(candidate: Candidate) -> bool:
    return any(gpu.vram_free_bytes is not None for gpu in candidate.gpus)


def _free(total: int | None, used: int | None) -> int | None:
    if total is None or used is None:
        return None
    return max(total - used, 0)
