"""The spread host: which launches run alone (with GPU offload) and which are spread, the
flags and tunnels a spread gets, clear refusals, and what losing a member does."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from backend.components.cluster.members import Member
from backend.components.federation.dial import LinkFailed, Socket
from backend.components.split.host import Peer, SpreadHost
from backend.components.split.members import Candidate, MemberGpu
from backend.devtools.tiny_model import ModelShape, write_model
from backend.protocol import errors
from backend.protocol.types.base import NodeId

GIB = 1024**3
HOST = NodeId("host-id")


def _member(name: str) -> Member:
    return Member(
        node_id=NodeId(f"{name}-id"),
        name=name,
        cert_der=name.encode(),
        fingerprint=f"sha256:{name}",
        added_by=HOST,
        added_at=0.0,
        address="192.0.2.1",
        node_port=14320,
    )


class Cluster:
    """This computer and its members, as the spread host reads them; the figures are set."""

    def __init__(self, ram: int | None = 8 * GIB, gpus: tuple[MemberGpu, ...] = ()) -> None:
        self.host = Candidate(HOST, ram, gpus, "host")
        self.peers: dict[str, Peer] = {}
        self.dialled: list[str] = []
        self.replans = 0
        self.replans_failing = 0  # how many re-plans fail before one succeeds

    def add(self, name: str, ram: int = 8 * GIB, *, reachable: bool = True) -> None:
        member = _member(name)
        self.peers[name] = Peer(member, reachable, Candidate(member.node_id, ram, (), name))

    def away(self, name: str) -> None:
        peer = self.peers[name]
        self.peers[name] = Peer(peer.member, False, peer.candidate)

    async def dial(self, member: Member) -> Socket:
        self.dialled.append(member.name)
        raise LinkFailed("no network in this test")

    async def replan(self) -> None:
        self.replans += 1
        if self.replans <= self.replans_failing:
            raise errors.InternalError("llama.cpp exited with code -6 before it was ready")

    def spread_host(self) -> SpreadHost:
        host = SpreadHost(
            host=lambda: self.host,
            peers=lambda: list(self.peers.values()),
            dial=self.dial,
            context_bytes=0,
            replan_waits=(0.0, 0.01, 0.01),
        )
        host.bind_replan(self.replan)
        return host


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "six.gguf"
    return write_model(path, shape=ModelShape(block_count=6))


def _value(args: tuple[str, ...], flag: str) -> str:
    return args[args.index(flag) + 1]


async def test_a_model_this_computer_holds_runs_here_with_offload_sized_to_its_vram(
    model: Path,
) -> None:
    cluster = Cluster(gpus=(MemberGpu("GPU0", 4 * GIB),))
    cluster.add("laptop")
    host = cluster.spread_host()
    extras = await host.shape("six", model, None)
    assert extras.args == ("-ngl", "999")
    assert extras.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert host.spread() is None
    assert cluster.dialled == []


async def test_before_the_first_telemetry_sample_the_model_runs_here_unjudged(
    model: Path,
) -> None:
    cluster = Cluster(ram=None)  # the broker just started: no reading of this computer yet
    cluster.add("laptop")
    host = cluster.spread_host()
    assert (await host.shape("six", model, None)).args == ()
    assert host.spread() is None


async def test_without_vram_figures_llama_cpp_keeps_its_own_default(model: Path) -> None:
    host = Cluster().spread_host()
    extras = await host.shape("six", model, None)
    assert extras.args == ()


async def test_named_members_get_a_tunnel_each_and_the_plans_flags(model: Path) -> None:
    cluster = Cluster()
    cluster.add("laptop")
    cluster.add("mini", ram=4 * GIB)
    host = cluster.spread_host()
    try:
        extras = await host.shape("six", model, ("laptop", "mini", "host"))
        endpoints = _value(extras.args, "--rpc").split(",")
        assert len(endpoints) == 2
        assert all(endpoint.startswith("127.0.0.1:") for endpoint in endpoints)
        # 8 : 8 : 4 GiB of RAM share 6 layers as 3, 2, 1 (largest remainder, ties to the first).
        status = host.spread()
        assert status is not None and status.state == "running"
        assert [(s.name, s.layers, s.memory, s.host) for s in status.shares] == [
            ("host", 3, "ram", True),
            ("laptop", 2, "ram", False),
            ("mini", 1, "ram", False),
        ]
        # The host keeps its layers on its CPU; the members' devices take the rest and output.
        assert _value(extras.args, "--tensor-split") == "2,2"
        assert _value(extras.args, "-ngl") == "4"
        # llama-server dialling a tunnel port reaches the member's dialler.
        port = int(endpoints[0].split(":")[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await reader.read() == b""  # the member cannot be reached: closed at once
        writer.close()
        assert cluster.dialled == ["laptop"]
    finally:
        await host.close()


async def test_a_member_not_in_the_cluster_is_refused_by_name(model: Path) -> None:
    host = Cluster().spread_host()
    with pytest.raises(errors.NotFound, match="nas is not a member"):
        await host.shape("six", model, ("nas",))


async def test_an_unreachable_member_is_refused_before_anything_starts(model: Path) -> None:
    cluster = Cluster()
    cluster.add("laptop", reachable=False)
    with pytest.raises(errors.Unavailable, match="laptop cannot be reached"):
        await cluster.spread_host().shape("six", model, ("laptop",))


async def test_too_big_for_the_members_is_refused_with_the_planners_reason(model: Path) -> None:
    cluster = Cluster(ram=1000)
    cluster.add("laptop", ram=1000)
    with pytest.raises(errors.Conflict, match="cannot be spread: the model needs"):
        await cluster.spread_host().shape("six", model, None)


async def test_a_model_too_big_for_this_computer_alone_is_spread_automatically(
    model: Path,
) -> None:
    size = await asyncio.to_thread(lambda: model.stat().st_size)
    cluster = Cluster(ram=size)  # 90 % of it is usable: not enough alone
    cluster.add("laptop", ram=4 * size)
    cluster.add("offline", ram=100 * size, reachable=False)
    host = cluster.spread_host()
    try:
        extras = await host.shape("six", model, None)
        status = host.spread()
        assert status is not None
        assert [s.name for s in status.shares] == ["host", "laptop"]
        assert len(_value(extras.args, "--rpc").split(",")) == 1
    finally:
        await host.close()


async def test_losing_a_member_degrades_the_spread_and_plans_again_without_it(
    model: Path,
) -> None:
    cluster = Cluster()
    cluster.add("laptop")
    cluster.add("mini")
    host = cluster.spread_host()
    try:
        await host.shape("six", model, ("laptop", "mini"))
        cluster.away("mini")
        host.members_changed()
        status = host.spread()
        assert status is not None and status.state == "degraded"
        assert status.reason.startswith("mini went away")
        for _ in range(100):
            if cluster.replans:
                break
            await asyncio.sleep(0.01)
        assert cluster.replans == 1
        # The engine's restart: stopped, then launched again with the same request.
        await host.released(crashed=False)
        extras = await host.shape("six", model, ("laptop", "mini"))
        assert len(_value(extras.args, "--rpc").split(",")) == 1
        status = host.spread()
        assert status is not None and status.state == "degraded"
        assert [s.name for s in status.shares] == ["host", "laptop"]
        assert "mini went away; planned again" in status.reason
        # A second loss is noticed too.
        cluster.away("laptop")
        host.members_changed()
        assert host.spread() is not None
        assert host.spread().reason.startswith("laptop went away")  # type: ignore[union-attr]
    finally:
        await host.close()


async def test_a_re_plan_that_fails_for_a_moment_is_tried_again(model: Path) -> None:
    cluster = Cluster()
    cluster.add("laptop")
    cluster.add("mini")
    cluster.replans_failing = 1
    host = cluster.spread_host()
    try:
        await host.shape("six", model, ("laptop", "mini"))
        cluster.away("mini")
        host.members_changed()
        for _ in range(200):
            if cluster.replans >= 2:
                break
            await asyncio.sleep(0.01)
        assert cluster.replans == 2
    finally:
        await host.close()


async def test_a_removed_member_counts_as_left(model: Path) -> None:
    cluster = Cluster()
    cluster.add("laptop")
    host = cluster.spread_host()
    try:
        await host.shape("six", model, ("laptop",))
        del cluster.peers["laptop"]
        host.members_changed()
        status = host.spread()
        assert status is not None and status.reason.startswith("laptop left the cluster")
    finally:
        await host.close()


async def test_a_crash_shows_the_spread_degraded_and_a_stop_clears_it(model: Path) -> None:
    cluster = Cluster()
    cluster.add("laptop")
    host = cluster.spread_host()
    try:
        await host.shape("six", model, ("laptop",))
        await host.released(crashed=True)
        status = host.spread()
        assert status is not None and status.state == "degraded"
        assert "stopped unexpectedly" in status.reason
        await host.shape("six", model, ("laptop",))
        await host.released(crashed=False)
        assert host.spread() is None
    finally:
        await host.close()


async def test_a_file_that_is_not_a_model_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"not a model")
    cluster = Cluster()
    cluster.add("laptop")
    with pytest.raises(errors.InvalidParams, match=r"broken\.gguf cannot be spread: not a GGUF"):
        await cluster.spread_host().shape("broken", path, ("laptop",))
    # Run here alone it is llama.cpp's to judge, with its own defaults.
    assert (await cluster.spread_host().shape("broken", path, None)).args == ()
