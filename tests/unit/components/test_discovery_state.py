"""The discovery directory's reducers: joining, merging, telemetry, and the eviction rules."""

from __future__ import annotations

import msgspec

from backend.components.discovery.state import (
    Announced,
    Directory,
    EngineFound,
    EvictionPolicy,
    FetchFailed,
    InfoFetched,
    NodeJoined,
    NodeLeft,
    NodeTelemetryChanged,
    NodeUpdated,
    Scanned,
    SourceDropped,
    apply,
    due_for_probe,
    reduce_telemetry,
)
from backend.components.discovery.timing import DiscoveryTiming, telemetry_delay
from backend.protocol.types.broker import Ports
from backend.protocol.types.nodes import (
    NodeCpu,
    NodeEngineModels,
    NodeGpu,
    NodeInfo,
    NodeMemory,
    NodeOs,
    NodeSource,
)

A = "11111111-1111-4111-8111-111111111111"
B = "22222222-2222-4222-8222-222222222222"
POLICY = EvictionPolicy(probe_from=3, evict_after=12, mass_loss_grace=6)


def info(node_id: str, *, cpu: float = 10.0, models: list[str] | None = None) -> NodeInfo:
    return NodeInfo(
        node_id=node_id,
        name=f"host-{node_id[0]}",
        version="0.1",
        os=NodeOs(),
        cpu=NodeCpu(utilization_percent=cpu),
        memory=NodeMemory(total_bytes=100, used_bytes=40),
        gpus=[
            NodeGpu(
                vendor="nvidia", utilization_percent=30.0, vram_used_bytes=1, vram_total_bytes=8
            ),
            NodeGpu(
                vendor="nvidia", utilization_percent=70.0, vram_used_bytes=2, vram_total_bytes=8
            ),
        ],
        telemetry_valid=True,
        ports=Ports(node=14320, ollama=11434, openai=1234, llamacpp=8080),
        engines={"ollama": NodeEngineModels(models=models or ["llama3.2"], loaded=[])},
    )


def found(directory: Directory, node_id: str, source: NodeSource | None = "mdns", at: float = 1.0):  # type: ignore[no-untyped-def]
    fetched = InfoFetched(info(node_id), "10.0.0.5", at, source=source, authenticated=True)
    return apply(directory, fetched, POLICY)


def scan(directory: Directory, times: int = 1) -> tuple[Directory, list[object]]:
    changes: list[object] = []
    for _ in range(times):
        directory, more = apply(directory, Scanned(), POLICY)
        changes += more
    return directory, changes


def test_a_node_joins_once_its_node_api_answered_and_carries_models_and_telemetry() -> None:
    directory, changes = found(Directory(), A)
    assert [type(c) for c in changes] == [NodeJoined]
    node = directory.entries[A].node
    assert node.sources == ["mdns"] and node.reachable and node.addresses == ["10.0.0.5"]
    assert node.engines["ollama"].models == ["llama3.2"]
    assert node.telemetry is not None
    assert node.telemetry.gpu_percent == 70.0 and node.telemetry.vram_total_bytes == 16


def test_an_announcement_of_an_unknown_node_does_not_add_it() -> None:
    directory, changes = apply(Directory(), Announced(A, ("10.0.0.5",), {"node": 1}, 1.0))
    assert changes == [] and directory.entries == {}


def test_a_poll_with_new_figures_is_a_telemetry_event_and_new_models_an_update() -> None:
    directory, _ = found(Directory(), A)
    polled = InfoFetched(info(A, cpu=55.0), "10.0.0.5", 3.0, authenticated=True)
    directory, changes = apply(directory, polled, POLICY)
    assert [type(c) for c in changes] == [NodeTelemetryChanged]
    polled = InfoFetched(info(A, models=["qwen"]), "10.0.0.5", 4.0, authenticated=True)
    directory, changes = apply(directory, polled, POLICY)
    assert [type(c) for c in changes] == [NodeUpdated]


def test_a_manual_and_an_mdns_sighting_of_one_uuid_are_one_node() -> None:
    directory, _ = found(Directory(), A, source="mdns")
    directory, changes = found(directory, A, source="manual")
    assert list(directory.entries) == [A]
    assert directory.entries[A].node.sources == ["mdns", "manual"]
    assert [type(c) for c in changes] == [NodeUpdated]
    directory, changes = apply(directory, SourceDropped(A, "manual"), POLICY)
    assert directory.entries[A].node.sources == ["mdns"] and isinstance(changes[0], NodeUpdated)
    directory, changes = apply(directory, SourceDropped(A, "mdns"), POLICY)
    assert directory.entries == {} and changes == [NodeLeft(A)]


def test_a_vanished_node_is_probed_from_the_third_miss_and_evicted_at_the_twelfth() -> None:
    # Scans every 5 s on a patched clock. The first scan after an answer consumes it, so the node
    # is evicted within (evict_after + 1) scan intervals of its last answer.
    directory, _ = found(Directory(), A)
    clock = 0.0
    evicted_at = None
    probed_from = None
    for _ in range(20):
        clock += 5.0
        directory, changes = scan(directory)
        if probed_from is None and due_for_probe(directory, POLICY):
            probed_from = clock
        if NodeLeft(A) in changes:
            evicted_at = clock
            break
        directory, _ = apply(directory, FetchFailed(A), POLICY)
    assert probed_from == (1 + 3) * 5.0
    assert evicted_at == (1 + 12) * 5.0
    assert A not in directory.entries


def test_a_node_answering_its_probe_stays() -> None:
    directory, _ = found(Directory(), A)
    for _ in range(30):
        directory, changes = scan(directory)
        assert changes == []
        if due_for_probe(directory, POLICY):
            directory, _ = found(directory, A, source=None)
    assert directory.entries[A].misses < POLICY.probe_from


def test_one_scan_that_loses_every_node_evicts_nobody() -> None:
    directory, _ = found(Directory(), A)
    directory, _ = found(directory, B)
    for _ in range(POLICY.evict_after):  # A misses up to the edge of eviction; B answers
        directory, _ = found(directory, B, source=None)
        directory, changes = scan(directory)
    assert directory.entries[A].misses == POLICY.evict_after - 1
    directory, changes = scan(directory)  # then this side loses everyone at once
    assert changes == [] and set(directory.entries) == {A, B}
    assert directory.mass_loss_scans == 1
    directory, _ = found(directory, B, source=None)  # the network is back
    directory, changes = scan(directory)
    assert changes == [NodeLeft(A)] and directory.mass_loss_scans == 0


def test_mass_loss_is_forgiven_only_for_a_bounded_number_of_scans() -> None:
    directory, _ = found(Directory(), A)
    directory, _ = found(directory, B)
    directory, changes = scan(directory, POLICY.mass_loss_grace + POLICY.evict_after + 1)
    assert set(changes) == {NodeLeft(A), NodeLeft(B)}


def test_losing_one_of_two_nodes_counts_against_it() -> None:
    directory, _ = found(Directory(), A)
    directory, _ = found(directory, B)
    for _ in range(POLICY.evict_after + 1):
        directory, _ = found(directory, B, source=None)
        directory, changes = scan(directory)
    assert changes == [NodeLeft(A)] and list(directory.entries) == [B]


def test_a_returning_node_is_noticed_with_the_same_uuid() -> None:
    directory, _ = found(Directory(), A)
    directory, _ = scan(directory, POLICY.evict_after + 1)
    assert A not in directory.entries
    directory, changes = found(directory, A, at=99.0)
    assert isinstance(changes[0], NodeJoined) and changes[0].node.node_id == A


def test_self_and_manual_nodes_are_never_evicted_by_scans() -> None:
    directory, _ = found(Directory(), A, source="self")
    directory, _ = found(directory, B, source="manual")
    directory, changes = scan(directory, 50)
    assert changes == [] and set(directory.entries) == {A, B}


def test_an_mdns_and_manual_node_that_vanishes_keeps_its_manual_entry() -> None:
    directory, _ = found(Directory(), A, source="mdns")
    directory, _ = found(directory, A, source="manual")
    directory, changes = scan(directory, POLICY.evict_after + 1)
    node = directory.entries[A].node
    assert node.sources == ["manual"] and not node.reachable
    assert [type(c) for c in changes] == [NodeUpdated]


def test_a_failed_poll_marks_the_node_unreachable_once() -> None:
    directory, _ = found(Directory(), A)
    directory, changes = apply(directory, FetchFailed(A), POLICY)
    assert not directory.entries[A].node.reachable and len(changes) == 1
    directory, changes = apply(directory, FetchFailed(A), POLICY)
    assert changes == []


def test_an_engine_only_node_is_keyed_by_its_manual_id() -> None:
    event = EngineFound(
        "manual:10.0.0.9:11434",
        "ollama on 10.0.0.9",
        "10.0.0.9",
        11434,
        "ollama",
        NodeEngineModels(models=["llama3.2"], loaded=["llama3.2"]),
        1.0,
    )
    directory, changes = apply(Directory(), event, POLICY)
    node = directory.entries["manual:10.0.0.9:11434"].node
    assert node.kind == "engine" and node.ports == {"ollama": 11434}
    assert isinstance(changes[0], NodeJoined)
    _, changes = apply(directory, event, POLICY)
    assert changes == []


def test_self_keeps_its_advertised_addresses_though_read_over_loopback() -> None:
    first = InfoFetched(info(A), "127.0.0.1", 1.0, source="self", addresses=("10.0.0.2",))
    directory, _ = apply(Directory(), first, POLICY)
    directory, _ = apply(directory, InfoFetched(info(A), "127.0.0.1", 2.0), POLICY)
    assert directory.entries[A].node.addresses == ["10.0.0.2"]
    assert directory.nodes()[0].node_id == A


def test_telemetry_backs_off_4_8_16_30_and_resets() -> None:
    timing = DiscoveryTiming()
    assert [telemetry_delay(timing, n) for n in range(6)] == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    shortened = DiscoveryTiming.from_environment({"PAIR_DISCOVERY_TELEMETRY_INTERVAL": "0.5"})
    assert telemetry_delay(shortened, 4) == 7.5
    assert (
        DiscoveryTiming.from_environment({"PAIR_DISCOVERY_SCAN_INTERVAL": "x"}).scan_interval == 5
    )


def test_wire_nodes_round_trip() -> None:
    directory, _ = found(Directory(), A)
    encoded = msgspec.json.encode(directory.nodes())
    assert msgspec.json.decode(encoded)[0]["node_id"] == A


def test_telemetry_carries_the_nodes_pending_work_when_it_reports_it() -> None:
    assert reduce_telemetry(info("a")).pending_jobs is None  # an older node says nothing
    reported = msgspec.structs.replace(info("a"), pending_jobs=4)
    telemetry = reduce_telemetry(reported)
    assert (telemetry.pending_jobs, telemetry.gpu_percent, telemetry.vram_total_bytes) == (
        4,
        70,
        16,
    )


def test_a_members_entry_keeps_each_gpu_and_its_host_facts_for_the_cards() -> None:
    member = msgspec.structs.replace(
        info(A), os=NodeOs(system="Linux", release="6.8.0"), cpu=NodeCpu(cores=16)
    )
    directory, _ = apply(
        Directory(), InfoFetched(member, "10.0.0.5", 1.0, source="mdns", authenticated=True)
    )
    node = directory.entries[A].node
    assert node.telemetry is not None and node.telemetry.gpus == member.gpus
    assert (node.system, node.cpu_threads) == ("Linux", 16)
    no_gpu = msgspec.structs.replace(info(B), gpus=[])
    assert reduce_telemetry(no_gpu).gpus is None  # omitted on the wire, not an empty list
