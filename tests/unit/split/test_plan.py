"""The split planner: shares from free memory, whole layers summing exactly, VRAM before RAM,
the fewest members, refusals that say why, and the same plan for the same figures."""

from __future__ import annotations

import pytest

from backend.components.split.members import Candidate, MemberGpu, candidate_from_node_info
from backend.components.split.plan import (
    ALL_LAYERS,
    SplitPlan,
    SplitRefused,
    plan_needs_split,
    plan_split,
)
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.types.nodes import NodeCpu, NodeGpu, NodeInfo, NodeMemory, NodeOs

GIB = 1024**3
PC, LAPTOP, MINI, NAS = NodeId("pc"), NodeId("laptop"), NodeId("mini"), NodeId("nas")


def _gpu_member(node: NodeId, *vram_free: int, ram: int = 64 * GIB) -> Candidate:
    gpus = tuple(MemberGpu(f"GPU{index}", free) for index, free in enumerate(vram_free))
    return Candidate(node, ram, gpus)


def _ram_member(node: NodeId, ram: int | None) -> Candidate:
    return Candidate(node, ram)


def _planned(result: SplitPlan | SplitRefused) -> SplitPlan:
    assert isinstance(result, SplitPlan), result
    return result


def test_shares_follow_free_memory() -> None:
    # 18 and 9 GiB usable after the 10 % headroom: 2 to 1, so 20 and 10 of 30 layers.
    members = [_gpu_member(PC, 20 * GIB), _gpu_member(LAPTOP, 10 * GIB)]
    plan = _planned(plan_split(24 * GIB, 30, members, PC, context_bytes=0))
    assert plan.host == PC
    assert plan.rpc_members == (LAPTOP,)
    assert plan.tensor_split == (20, 11)  # the laptop also takes the output layer's slot
    assert plan.tensor_split_arg() == "20,11"
    assert plan.gpu_layers == ALL_LAYERS
    assert [(s.node_id, s.layers, s.share_bytes) for s in plan.shares] == [
        (PC, 20, 16 * GIB),
        (LAPTOP, 10, 8 * GIB),
    ]


def test_the_host_keeps_the_context_allowance_out_of_its_share() -> None:
    # The host's 18 GiB usable less 9 GiB of context leaves 9: an even split now.
    members = [_gpu_member(PC, 20 * GIB), _gpu_member(LAPTOP, 10 * GIB)]
    plan = _planned(plan_split(12 * GIB, 30, members, PC, context_bytes=9 * GIB))
    assert [share.layers for share in plan.shares] == [15, 15]


def test_layers_are_whole_and_sum_exactly_with_uneven_figures() -> None:
    members = [_gpu_member(PC, 7 * GIB), _gpu_member(LAPTOP, 5 * GIB), _gpu_member(MINI, 3 * GIB)]
    plan = _planned(plan_split(12 * GIB, 41, members, PC, context_bytes=0))
    assert sum(plan.tensor_split) == 41 + 1
    assert sum(share.share_bytes for share in plan.shares) == 12 * GIB
    # 41 * 7/15 = 19.13, 41 * 5/15 = 13.67, 41 * 3/15 = 8.2: the largest remainder gets one.
    assert plan.tensor_split == (19, 14, 8 + 1)


def test_the_members_cannot_hold_it_is_refused_with_the_figures() -> None:
    members = [_gpu_member(PC, 20 * 10**9), _gpu_member(LAPTOP, 10 * 10**9)]
    refused = plan_split(42_100_000_000, 80, members, PC, context_bytes=0)
    assert refused == SplitRefused(
        "the model needs 42.1 GB; the members have 27.0 GB free together "
        "(after keeping 10 % of each free)"
    )


def test_the_refusal_counts_the_context_in_what_the_model_needs() -> None:
    members = [_gpu_member(PC, 20 * 10**9), _gpu_member(LAPTOP, 10 * 10**9)]
    refused = plan_split(41_100_000_000, 80, members, PC, context_bytes=10**9)
    assert isinstance(refused, SplitRefused)
    assert refused.why.startswith("the model needs 42.1 GB; the members have 27.0 GB free")


def test_a_member_without_memory_figures_is_refused_by_name() -> None:
    members = [_gpu_member(PC, 20 * GIB), Candidate(LAPTOP, None, (MemberGpu("GPU0", None),))]
    refused = plan_split(GIB, 10, members, PC)
    assert refused == SplitRefused("laptop reports no memory figures, so its share cannot be sized")


def test_a_named_member_is_called_by_its_name() -> None:
    members = [_gpu_member(PC, 20 * GIB), Candidate(LAPTOP, None, (), "Ana's laptop")]
    refused = plan_split(GIB, 10, members, PC)
    assert isinstance(refused, SplitRefused)
    assert refused.why.startswith("Ana's laptop reports no memory figures")


def test_a_host_without_room_for_the_context_is_refused() -> None:
    members = [_ram_member(PC, GIB), _gpu_member(LAPTOP, 40 * GIB)]
    refused = plan_split(8 * GIB, 32, members, PC, context_bytes=2 * GIB)
    assert isinstance(refused, SplitRefused)
    assert refused.why == (
        "pc would run the model but has 1.0 GB free, less than the 2.1 GB its context needs"
    )


def test_vram_is_lent_before_ram() -> None:
    # The laptop's 64 GiB of RAM would hold it; its GPU's 8 GiB is what it lends.
    members = [_gpu_member(PC, 10 * GIB), _gpu_member(LAPTOP, 8 * GIB, ram=64 * GIB)]
    plan = _planned(plan_split(12 * GIB, 24, members, PC, context_bytes=0))
    assert [share.memory for share in plan.shares] == ["vram", "vram"]
    laptop = plan.shares[1]
    assert laptop.share_bytes <= 8 * GIB * 9 // 10
    refused = plan_split(20 * GIB, 24, members, PC, context_bytes=0)
    assert isinstance(refused, SplitRefused)


def test_a_gpu_without_vram_figures_lends_the_members_ram() -> None:
    mac = Candidate(MINI, 20 * GIB, (MemberGpu("Apple M2", None),))
    plan = _planned(plan_split(20 * GIB, 20, [_gpu_member(PC, 10 * GIB), mac], PC, context_bytes=0))
    assert [share.memory for share in plan.shares] == ["vram", "ram"]
    assert [share.layers for share in plan.shares] == [7, 13]  # 9 : 18 GiB, so 6.67 : 13.33


def test_a_host_lending_ram_keeps_its_layers_on_its_cpu() -> None:
    members = [_ram_member(PC, 20 * GIB), _gpu_member(LAPTOP, 10 * GIB)]
    plan = _planned(plan_split(24 * GIB, 30, members, PC, context_bytes=0))
    assert [share.layers for share in plan.shares] == [20, 10]
    assert plan.tensor_split == (11,)  # only the laptop's GPU is an offload device
    assert plan.gpu_layers == 11  # the last 10 layers and the output go to the laptop


def test_a_host_with_no_room_for_layers_still_runs_the_model() -> None:
    members = [_gpu_member(PC, GIB * 12 // 10), _gpu_member(LAPTOP, 30 * GIB)]
    plan = _planned(plan_split(20 * GIB, 20, members, PC, context_bytes=GIB))
    assert plan.shares[0].layers == 0
    assert plan.tensor_split == (0, 21)
    assert plan.gpu_layers == ALL_LAYERS


def test_a_member_with_two_gpus_gets_one_proportion_per_gpu_in_order() -> None:
    members = [_gpu_member(PC, 10 * GIB), _gpu_member(LAPTOP, 10 * GIB, 5 * GIB)]
    plan = _planned(plan_split(20 * GIB, 25, members, PC, context_bytes=0))
    assert plan.tensor_split == (10, 10, 6)
    assert plan.shares[1].device_layers == (10, 5)
    assert plan.shares[1].layers == 15


def test_the_fewest_members_that_fit_are_taken_largest_first() -> None:
    members = [
        _gpu_member(PC, 10 * GIB),
        _gpu_member(LAPTOP, 6 * GIB),
        _gpu_member(MINI, 20 * GIB),
        _gpu_member(NAS, 8 * GIB),
    ]
    plan = _planned(plan_split(20 * GIB, 30, members, PC, context_bytes=0))
    assert plan.rpc_members == (MINI,)
    plan = _planned(plan_split(30 * GIB, 30, members, PC, context_bytes=0))
    assert plan.rpc_members == (MINI, NAS)


def test_named_members_each_take_a_share_even_when_fewer_would_fit() -> None:
    members = [_ram_member(PC, 8 * GIB), _ram_member(LAPTOP, 8 * GIB), _ram_member(MINI, 4 * GIB)]
    # The host alone holds a 1 GiB model; the user named the others, so all three share it.
    assert _planned(plan_split(GIB, 10, members, PC, context_bytes=0)).rpc_members == ()
    plan = _planned(plan_split(GIB, 10, members, PC, context_bytes=0, every_member=True))
    assert plan.rpc_members == (LAPTOP, MINI)
    assert [share.layers for share in plan.shares] == [4, 4, 2]
    # The host keeps its 4 layers on its CPU: llama.cpp offloads the other 6 and the output.
    assert plan.gpu_layers == 7
    assert plan.tensor_split == (4, 3)


def test_members_with_equal_room_are_taken_by_node_id() -> None:
    members = [_gpu_member(PC, 10 * GIB), _gpu_member(NAS, 10 * GIB), _gpu_member(MINI, 10 * GIB)]
    plan = _planned(plan_split(14 * GIB, 30, members, PC, context_bytes=0))
    assert plan.rpc_members == (MINI,)


def test_the_same_figures_give_the_same_plan_in_any_order() -> None:
    members = [
        _gpu_member(PC, 9 * GIB),
        _gpu_member(LAPTOP, 7 * GIB),
        _ram_member(MINI, 11 * GIB),
        _gpu_member(NAS, 7 * GIB),
    ]
    first = plan_split(25 * GIB, 61, members, PC)
    assert plan_split(25 * GIB, 61, list(reversed(members)), PC) == first
    assert plan_split(25 * GIB, 61, members, PC) == first


def test_the_reason_names_each_members_share() -> None:
    members = [_gpu_member(PC, 20 * 10**9), _gpu_member(LAPTOP, 10 * 10**9)]
    plan = _planned(plan_split(24 * 10**9, 30, members, PC, context_bytes=0))
    assert plan.reason == (
        "Spread over 2 members, in proportion to their free memory: pc runs the model and "
        "holds 20 of its 30 layers (16.0 GB in VRAM); laptop holds 10 (8.0 GB in VRAM)."
    )


def test_the_output_slot_goes_to_the_last_device_holding_layers() -> None:
    # The laptop's second GPU has nothing free: the output must not land on it.
    members = [_gpu_member(PC, 10 * GIB), _gpu_member(LAPTOP, 10 * GIB, 0)]
    plan = _planned(plan_split(18 * GIB, 20, members, PC, context_bytes=0))
    assert plan.tensor_split == (10, 11, 0)


def test_a_model_one_member_holds_needs_no_split() -> None:
    members = [_gpu_member(PC, 8 * GIB, ram=16 * GIB), _ram_member(LAPTOP, 32 * GIB)]
    assert not plan_needs_split(20 * GIB, members, context_bytes=GIB)  # the laptop's RAM
    assert plan_needs_split(40 * GIB, members, context_bytes=GIB)
    assert plan_needs_split(GIB, [], context_bytes=0)


def test_bad_input_is_a_clear_error() -> None:
    members = [_gpu_member(PC, 8 * GIB)]
    with pytest.raises(ValueError, match="must be positive"):
        plan_split(0, 10, members, PC)
    with pytest.raises(ValueError, match="must be positive"):
        plan_split(GIB, 0, members, PC)
    with pytest.raises(ValueError, match="context allowance must not be negative"):
        plan_split(GIB, 10, members, PC, context_bytes=-1)
    with pytest.raises(ValueError, match="the host laptop is not among the candidates"):
        plan_split(GIB, 10, members, LAPTOP)
    with pytest.raises(ValueError, match="appears twice"):
        plan_split(GIB, 10, members * 2, PC)
    with pytest.raises(ValueError, match="negative free memory"):
        plan_split(GIB, 10, [_ram_member(PC, -1)], PC)


def test_a_candidate_is_read_from_node_info() -> None:
    info = NodeInfo(
        node_id=PC,
        name="Gaming PC",
        version="1",
        os=NodeOs(),
        cpu=NodeCpu(),
        memory=NodeMemory(total_bytes=64 * GIB, used_bytes=24 * GIB),
        gpus=[
            NodeGpu(
                vendor="nvidia", name="RTX 4090", vram_total_bytes=24 * GIB, vram_used_bytes=GIB
            ),
            NodeGpu(vendor="amd"),
        ],
        telemetry_valid=True,
        ports=Ports(node=1, ollama=2, openai=3, llamacpp=4),
    )
    assert candidate_from_node_info(info) == Candidate(
        PC, 40 * GIB, (MemberGpu("RTX 4090", 23 * GIB), MemberGpu("amd", None)), "Gaming PC"
    )


def test_the_worked_example_of_docs_split() -> None:
    gb = 10**9
    pc = Candidate(PC, 32 * gb, (MemberGpu("RTX 4090", 24 * gb),), "gaming-pc")
    laptop = Candidate(LAPTOP, 16 * gb, (), "laptop")
    mini = Candidate(MINI, 32 * gb, (MemberGpu("Apple M4 Pro", None),), "mac-mini")
    assert plan_needs_split(40 * gb, [pc, laptop])
    assert plan_split(40 * gb, 80, [pc, laptop], PC) == SplitRefused(
        "the model needs 41.1 GB; the members have 36.0 GB free together "
        "(after keeping 10 % of each free)"
    )
    plan = _planned(plan_split(40 * gb, 80, [pc, laptop, mini], PC))
    assert (plan.rpc_members, plan.tensor_split_arg(), plan.gpu_layers) == ((MINI,), "33,48", 999)
    assert plan.reason == (
        "Spread over 2 members, in proportion to their free memory: gaming-pc runs the model and "
        "holds 33 of its 80 layers (16.5 GB in VRAM); mac-mini holds 47 (23.5 GB in RAM)."
    )
