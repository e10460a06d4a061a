"""The split planner: which members hold which layers of a model too big for any one of them.

A plain function of the model's size and layer count and each member's free memory; the
result is a ``SplitPlan`` (the host that runs ``llama-server``, the ``--rpc`` members in order,
``--tensor-split`` and ``-ngl``) or a ``SplitRefused`` saying why no plan fits. Rules:

- each device keeps ``HEADROOM_PERCENT`` of its free memory, and the host also keeps the
  context allowance (KV cache and compute buffers);
- a member with VRAM figures lends its GPUs, one without lends its RAM;
- the host takes a share when it has room, then the fewest other members that fit, largest
  free first (ties by node id), so the same figures always give the same plan;
- layers are shared in proportion to usable memory, in whole layers that sum exactly to the
  model's, and no device gets more than it can hold;
- ``--tensor-split`` lists llama-server's devices in its order (the host's GPUs, then each
  ``--rpc`` endpoint's), the last one holding layers counting the output layer's slot too.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from backend.components.split.apportion import apportion
from backend.components.split.members import (
    HEADROOM_PERCENT,
    Candidate,
    Device,
    MemoryKind,
    check_candidates,
    devices,
    has_memory_figures,
    whole_capacity,
)
from backend.protocol.types.base import NodeId

DEFAULT_CONTEXT_BYTES = 1024**3
# llama.cpp clamps -ngl to the model's layers; a large value means "every layer and the output".
ALL_LAYERS = 999


class MemberShare(msgspec.Struct, frozen=True):
    """What one member holds: its layers, their bytes, and the layers per device in order."""

    node_id: NodeId
    label: str
    memory: MemoryKind
    layers: int
    share_bytes: int
    device_layers: tuple[int, ...]


class SplitPlan(msgspec.Struct, frozen=True):
    """A model spread over members; ``shares`` holds the host first, then the RPC members."""

    host: NodeId
    rpc_members: tuple[NodeId, ...]
    tensor_split: tuple[int, ...]
    gpu_layers: int
    shares: tuple[MemberShare, ...]
    reason: str

    def tensor_split_arg(self) -> str:
        """The ``--tensor-split`` value: the proportions, comma-separated."""
        return ",".join(str(part) for part in self.tensor_split)


class SplitRefused(msgspec.Struct, frozen=True):
    """No plan fits; ``why`` says so in plain English."""

    why: str


class _Placed(msgspec.Struct, frozen=True):
    candidate: Candidate
    devices: tuple[Device, ...]
    caps: tuple[int, ...]  # whole layers each device can hold


def plan_needs_split(
    model_bytes: int, members: Sequence[Candidate], *, context_bytes: int = DEFAULT_CONTEXT_BYTES
) -> bool:
    """Whether no single member can hold the model whole (in VRAM or in RAM) with headroom."""
    _check_model(model_bytes, 1, context_bytes)
    return all(whole_capacity(member, context_bytes) < model_bytes for member in members)


def plan_split(
    model_bytes: int,
    layer_count: int,
    candidates: Sequence[Candidate],
    host: NodeId,
    *,
    context_bytes: int = DEFAULT_CONTEXT_BYTES,
    every_member: bool = False,
) -> SplitPlan | SplitRefused:
    """The plan spreading a ``model_bytes``, ``layer_count``-layer model over ``candidates``
    with ``host`` running ``llama-server``, or why none fits. ``every_member``: every candidate
    takes a share (the user named them), not only the fewest that fit."""
    _check_model(model_bytes, layer_count, context_bytes)
    check_candidates(candidates, host)
    for candidate in candidates:
        if not has_memory_figures(candidate):
            return SplitRefused(
                f"{candidate.label} reports no memory figures, so its share cannot be sized"
            )
    placed = [
        _place(c, model_bytes, layer_count, context_bytes if c.node_id == host else 0)
        for c in candidates
    ]
    host_placed = next(p for p in placed if p.candidate.node_id == host)
    refusal = _refusal(model_bytes, layer_count, context_bytes, placed, host_placed)
    if refusal is not None:
        return refusal
    others = _largest_first(placed, host_placed)
    chosen = [
        host_placed,
        *(others if every_member else _fewest_that_fit(others, host_placed, layer_count)),
    ]
    return _plan(model_bytes, layer_count, chosen)


def _check_model(model_bytes: int, layer_count: int, context_bytes: int) -> None:
    if model_bytes <= 0 or layer_count <= 0:
        raise ValueError("the model's size and layer count must be positive")
    if context_bytes < 0:
        raise ValueError("the context allowance must not be negative")


def _place(candidate: Candidate, model_bytes: int, layer_count: int, reserved: int) -> _Placed:
    found = devices(candidate, reserved_bytes=reserved)
    # Whole layers that fit: layers * model_bytes / layer_count <= usable, in integers.
    caps = tuple(device.usable_bytes * layer_count // model_bytes for device in found)
    return _Placed(candidate, found, caps)


def _refusal(
    model_bytes: int,
    layer_count: int,
    context_bytes: int,
    placed: Sequence[_Placed],
    host: _Placed,
) -> SplitRefused | None:
    host_usable = sum(device.usable_bytes for device in devices(host.candidate))
    if host_usable < context_bytes:
        return SplitRefused(
            f"{host.candidate.label} would run the model but has "
            f"{_gb(host_usable)} free, less than the {_gb(context_bytes)} its "
            "context needs"
        )
    usable = sum(device.usable_bytes for p in placed for device in p.devices) + context_bytes
    needed = model_bytes + context_bytes
    if usable < needed:
        return SplitRefused(
            f"the model needs {_gb(needed)}; the members have {_gb(usable)} "
            f"free together (after keeping {HEADROOM_PERCENT} % of each free)"
        )
    if sum(sum(p.caps) for p in placed) < layer_count:
        return SplitRefused(
            f"the model's layers ({_gb(model_bytes // layer_count)} each) do not fit whole "
            "in the members' free memory"
        )
    return None


def _largest_first(placed: Sequence[_Placed], host: _Placed) -> list[_Placed]:
    return sorted(
        (p for p in placed if p is not host),
        key=lambda p: (-sum(d.usable_bytes for d in p.devices), p.candidate.node_id),
    )


def _fewest_that_fit(others: Sequence[_Placed], host: _Placed, layer_count: int) -> list[_Placed]:
    chosen: list[_Placed] = []
    room = sum(host.caps)
    for member in others:
        if room >= layer_count:
            break
        chosen.append(member)
        room += sum(member.caps)
    return chosen


def _plan(model_bytes: int, layer_count: int, chosen: Sequence[_Placed]) -> SplitPlan:
    weights = [device.usable_bytes for p in chosen for device in p.devices]
    caps = [cap for p in chosen for cap in p.caps]
    per_device = apportion(layer_count, weights, caps)
    shares: list[MemberShare] = []
    start, layers_before = 0, 0
    for member in chosen:
        device_layers = per_device[start : start + len(member.devices)]
        start += len(member.devices)
        layers = sum(device_layers)
        # Cumulative bounds make the byte shares sum exactly to the model's size.
        share_bytes = (
            model_bytes * (layers_before + layers) // layer_count
            - model_bytes * layers_before // layer_count
        )
        layers_before += layers
        candidate = member.candidate
        kind = member.devices[0].kind
        shares.append(
            MemberShare(
                candidate.node_id, candidate.label, kind, layers, share_bytes, device_layers
            )
        )
    return _assemble(layer_count, shares)


def _assemble(layer_count: int, shares: Sequence[MemberShare]) -> SplitPlan:
    host, *rpc = shares
    # llama-server's devices: the host's own GPUs first, then each --rpc endpoint's, in order.
    # A host lending RAM keeps its layers on its CPU, which --tensor-split does not list.
    offloaded = [] if host.memory == "ram" else list(host.device_layers)
    tensor_split = _with_output_slot(offloaded + [n for share in rpc for n in share.device_layers])
    return SplitPlan(
        host=host.node_id,
        rpc_members=tuple(share.node_id for share in rpc),
        tensor_split=tensor_split,
        gpu_layers=_gpu_layers(layer_count, host, tensor_split),
        shares=tuple(shares),
        reason=_reason(layer_count, shares),
    )


def _with_output_slot(device_layers: list[int]) -> tuple[int, ...]:
    """The proportions llama.cpp reads: it shares out the offloaded layers plus the output as
    one more slot, which lands on the last device given any, so that device counts it too."""
    holding = [index for index, layers in enumerate(device_layers) if layers > 0]
    if holding:
        device_layers[holding[-1]] += 1
    return tuple(device_layers)


def _gpu_layers(layer_count: int, host: MemberShare, tensor_split: Sequence[int]) -> int:
    if not tensor_split:
        return 0
    if host.memory == "vram" or host.layers == 0:
        return ALL_LAYERS
    # llama.cpp offloads the last -ngl of its layer_count + 1 slots (the output is the last),
    # so the host's CPU keeps exactly its first ``host.layers`` layers.
    return layer_count + 1 - host.layers


def _reason(layer_count: int, shares: Sequence[MemberShare]) -> str:
    host, *rpc = shares
    where = {"vram": "VRAM", "ram": "RAM"}
    parts = [
        f"{host.label} runs the model and holds {host.layers} of its {layer_count} "
        f"layers ({_gb(host.share_bytes)} in {where[host.memory]})"
    ]
    parts += [
        f"{share.label} holds {share.layers} ({_gb(share.share_bytes)} in {where[share.memory]})"
        for share in rpc
    ]
    members = "member" if len(shares) == 1 else "members"
    return (
        f"Spread over {len(shares)} {members}, in proportion to their free memory: "
        + "; ".join(parts)
        + "."
    )


def _gb(size: int) -> str:
    return f"{size / 1e9:.1f} GB"
