"""Properties of every plan over generated members: the layers sum to the model's, the bytes to
its size, no member gets more than its free memory less the headroom, and a refusal happens
only when the members truly cannot hold the model."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from backend.components.split.members import HEADROOM_PERCENT, Candidate, MemberGpu
from backend.components.split.plan import SplitPlan, plan_split
from backend.protocol.types.base import NodeId
from tests.unit.split.llama_layers import CPU, placed_layers

GIB = 1024**3


def _gib_and_change(sizes: list[int]) -> st.SearchStrategy[int]:
    """A size from ``sizes`` (GiB) plus up to a GiB of change: spread out, not all small."""
    change = st.integers(min_value=0, max_value=GIB)
    return st.builds(lambda gib, extra: gib * GIB + extra, st.sampled_from(sizes), change)


_free = _gib_and_change([0, 2, 4, 6, 8, 12, 16, 24, 32, 48])
# The host always has room for the context (a unit test covers the host that has not), so the
# generated cases spend themselves on the shares.
_host_free = _gib_and_change([3, 4, 6, 8, 12, 16])


def _gpus(free: st.SearchStrategy[int | None]) -> st.SearchStrategy[list[MemberGpu]]:
    return st.lists(st.builds(MemberGpu, st.sampled_from(["GPU0", "GPU1"]), free), max_size=3)


@st.composite
def _members(draw: st.DrawFn) -> list[Candidate]:
    host = Candidate(NodeId("host"), draw(_host_free), tuple(draw(_gpus(_host_free))))
    count = draw(st.integers(min_value=1, max_value=5))
    others = [
        Candidate(NodeId(f"node-{index}"), draw(_free), tuple(draw(_gpus(st.none() | _free))))
        for index in range(count)
    ]
    return [host, *others]


def _lent(candidate: Candidate) -> list[int]:
    """The free bytes of the devices a member lends: its GPUs with VRAM figures, else its RAM."""
    if any(gpu.vram_free_bytes is not None for gpu in candidate.gpus):
        return [gpu.vram_free_bytes or 0 for gpu in candidate.gpus]
    return [candidate.ram_free_bytes or 0]


def _device_usable(candidate: Candidate, reserved: int) -> list[int]:
    """Each lent device's free bytes less the headroom, the reserve taken from the first ones."""
    usable = []
    for free in _lent(candidate):
        left = free - free * HEADROOM_PERCENT // 100
        taken = min(left, reserved)
        reserved -= taken
        usable.append(left - taken)
    return usable


def _usable(candidate: Candidate, reserved: int) -> int:
    total = sum(free - free * HEADROOM_PERCENT // 100 for free in _lent(candidate))
    return total - reserved


@st.composite
def _cases(draw: st.DrawFn) -> tuple[list[Candidate], int]:
    """Members and a model sized against their memory, so plans and refusals both come up."""
    members = draw(_members())
    total = sum(sum(_lent(member)) for member in members)
    percent = draw(st.integers(min_value=20, max_value=120))
    return members, max(total * percent // 100, 1)


@settings(max_examples=400, deadline=None, database=None, derandomize=True)
@given(
    case=_cases(),
    layer_count=st.integers(min_value=1, max_value=128),
    context_bytes=st.integers(min_value=0, max_value=2 * GIB),
)
def test_every_plan_fits_and_every_refusal_is_needed(
    case: tuple[list[Candidate], int], layer_count: int, context_bytes: int
) -> None:
    members, model_bytes = case
    host = members[0].node_id
    result = plan_split(model_bytes, layer_count, members, host, context_bytes=context_bytes)
    if isinstance(result, SplitPlan):
        _check_plan(result, members, model_bytes, layer_count, context_bytes)
    else:
        # A layer lies whole on one device: count the layers each device holds on its own.
        whole_layers = sum(
            usable * layer_count // model_bytes
            for member in members
            for usable in _device_usable(member, context_bytes if member.node_id == host else 0)
        )
        short_of_layers = whole_layers < layer_count
        host_short = _usable(members[0], 0) < context_bytes
        assert short_of_layers or host_short, result.why


def _check_plan(
    plan: SplitPlan,
    members: list[Candidate],
    model_bytes: int,
    layer_count: int,
    context_bytes: int,
) -> None:
    by_id = {member.node_id: member for member in members}
    assert sum(share.layers for share in plan.shares) == layer_count
    assert sum(share.share_bytes for share in plan.shares) == model_bytes
    for share in plan.shares:
        reserved = context_bytes if share.node_id == plan.host else 0
        assert share.share_bytes <= _usable(by_id[share.node_id], reserved)
        device_usable = _device_usable(by_id[share.node_id], reserved)
        for layers, usable in zip(share.device_layers, device_usable, strict=True):
            assert layers * model_bytes <= usable * layer_count
        assert sum(share.device_layers) == share.layers
    _check_flags(plan, layer_count)


def _check_flags(plan: SplitPlan, layer_count: int) -> None:
    """llama.cpp, given the plan's -ngl and --tensor-split, puts each share where it belongs."""
    host, *rpc = plan.shares
    expected: list[int] = []
    device = 0
    if host.memory == "ram":
        expected += [CPU] * host.layers
        offloaded_shares = rpc
    else:
        offloaded_shares = list(plan.shares)
    for share in offloaded_shares:
        for layers in share.device_layers:
            expected += [device] * layers
            device += 1
    assert placed_layers(layer_count, plan.gpu_layers, plan.tensor_split) == expected
