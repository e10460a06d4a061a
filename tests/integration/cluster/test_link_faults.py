"""The network between paired members fails for real, and a client at A's door still gets an
answer: A in a namespace with no engine, B (and C) in namespaces of their own with the model
on an emulated Ollama, all on one bridge; faults from ``tests/support/netfaults.py``.

- a blackhole route on B towards A (A's packets reach B, nothing comes back): a request
  waiting on B before its first byte is answered 503 with ``Retry-After``, naming B, and A's
  door stops listing B's models; with C serving the model too, the request succeeds via C;
- a stream flowing from B when the link dies ends with Ollama's error record, never ``done``;
- the route removed, A serves B's model again (healing), without a restart;
- B's link down instead of a route: the same answer;
- TCP dead but B's mDNS still arriving at A: A does not route to B;
- an engine silent for longer than the relay's idle limit between chunks, behind a live link,
  is slow, not dead: its stream is not cut; likewise with 300 ms of latency (``netem``, where
  the kernel has it). A's idle limit is set to a few seconds there
  (``PAIR_PROXY_RELAY_IDLE_TIMEOUT_S``), so the engine's silence outlives it in seconds, not
  half a minute.

The clients run in A's namespace (a front door lets its own host in without a key) with
timeouts far shorter than the door's 120 s header and first-content timeouts: what is
asserted is what the client saw within them, never how fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from backend.components.proxy.table import RELAY_IDLE_TIMEOUT_ENV as RELAY_IDLE_ENV
from backend.protocol import errors, methods
from backend.protocol.types.base import NodeId
from tests.integration.cluster.test_every_model_cluster import _join_network_namespace
from tests.integration.cluster.test_three_nodes import (
    Host,
    Node,
    _clients,
    _pair,
    _until,
    hosts,
)
from tests.integration.conftest import Client
from tests.integration.engines.conftest import OLLAMA_SHIM, write_script
from tests.support.namespace_brokers import NamespaceBrokers
from tests.support.netfaults import LinkFaults, netem_unavailable
from tests.support.ports import free_port

__all__ = ["hosts", "start_node"]  # fixtures

# Three brokers started, paired and listed, then a fault and its answer: on a loaded machine,
# more than the suite's default two minutes.
pytestmark = [
    pytest.mark.timeout(360),
    pytest.mark.linux_only("network namespaces, and `ip route`/`ip rule` faults inside them"),
]

T = TypeVar("T")

WAITING = "slow-start:latest"  # its first token comes after FIRST_TOKEN_S: a request waits on it
WAITING_ON_B = "b-slow-start:latest"  # as WAITING, and only B has it (C has WAITING too)
FLOWING = "flowing:latest"  # streams one token every 50 ms, REPLY_TOKENS of them
TRICKLE = "trickle:latest"  # one token every TRICKLE_GAP_S: slow but live
FIRST_TOKEN_S = 10
# The relay's idle limit between a member's chunks, at A, in the slow-engine tests (the
# product's is 20 s); the engine's gap is well past it and far short of the client's timeout:
# only a relay that knows the member is still there (its link is up) waits it out.
RELAY_IDLE_S = 3.0
TRICKLE_GAP_S = 8
REPLY_TOKENS = 400
B_NAME = "member-b"
CLIENT_TIMEOUT_S = 40.0  # a third of the door's header timeout: the old code exceeds it
HEAL_TIMEOUT_S = 30.0
ROUTING_TIMEOUT_S = 60.0  # bring-up on a loaded machine included
EMULATOR = (
    *("--token-delay", "0.05", "--reply-tokens", str(REPLY_TOKENS), "--load-delay", "0.2"),
    *("--model-pace", f"{WAITING}=::0:{FIRST_TOKEN_S}"),
    *("--model-pace", f"{WAITING_ON_B}=::0:{FIRST_TOKEN_S}"),
    *("--model-pace", f"{TRICKLE}={1 / TRICKLE_GAP_S}::0:"),
)
JOIN_WINDOW = "cluster:open-join-window"
_SHIM_ARGV = '"--parallel", os.environ.get("OLLAMA_NUM_PARALLEL", "1")]'


@dataclass(frozen=True)
class Seen:
    """What a client at A's door saw: the status, ``Retry-After``, the body (each NDJSON line
    of a stream), and how long until the answer ended (None: it never did, within the
    client's timeout); ``ended_at``: when, on the monotonic clock."""

    status: int
    retry_after: str | None
    lines: tuple[str, ...]
    seconds: float | None
    ended_at: float = 0.0

    @property
    def records(self) -> list[dict[str, Any]]:
        """The body's JSON records (one per line)."""
        return [json.loads(line) for line in self.lines if line.strip()]


@dataclass(frozen=True)
class Cluster:
    """A and its members, their RPC clients and node ids, and A's Ollama door."""

    nodes: list[Node]
    clients: list[Client]
    ids: list[NodeId]
    door: str


@pytest.fixture
def start_node(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """Start brokers in namespaces, discovery at its own pace; all stopped afterwards."""
    brokers = NamespaceBrokers(tmp_path)
    try:
        yield brokers.start
    finally:
        brokers.stop_all()


@pytest.fixture
def faults(hosts: list[Host]) -> Iterator[LinkFaults]:
    """Link faults on namespaces (skips on loopback hosts: a member's relay port comes from its
    node-info, so a fault proxy cannot be put between two brokers), all undone afterwards."""
    if hosts[0].namespace is None:
        pytest.skip("needs network namespaces (root and `ip netns`) to break a link for real")
    made = LinkFaults()
    try:
        yield made
    finally:
        assert not made.restore_all(), "a fault could not be undone"


def start_member(
    start_node: Callable[..., Node],
    tmp_path: Path,
    host: Host,
    name: str,
    models: str,
    env: dict[str, str] | None = None,
) -> Node:
    """A broker started on ``host`` whose Ollama (the emulator) has ``models`` at the test's
    paces (``env``: added to the broker's environment); not yet serving (``cluster_of`` waits
    for the brokers it starts all at once)."""
    extra = ", ".join(repr(arg) for arg in EMULATOR)
    text = OLLAMA_SHIM.replace('"tinyllama:latest,qwen2:0.5b"', repr(models))
    text = text.replace(_SHIM_ARGV, f"{_SHIM_ARGV[:-1]}, {extra}]")
    shim = write_script(tmp_path / f"ollama-paced-{name}", text)
    runtime = {"port": free_port(), "ready": {"timeout_s": 30}}
    runtime["env"] = {"OLLAMA_NUM_PARALLEL": "4"}
    override = {"detect": [{"path": str(shim)}], "runtime": runtime}
    return start_node(host, name, models, override=override, env=env, wait=False)


@contextlib.asynccontextmanager
async def cluster_of(
    start_node: Callable[..., Node],
    tmp_path: Path,
    hosts: list[Host],
    members: int,
    relay_idle_s: float | None = None,
) -> AsyncIterator[Cluster]:
    """A (no engine) paired with B (every model) and, with ``members`` 2, C (``WAITING``);
    yields once A's door lists B's models. ``relay_idle_s``: A's relay idle limit, if not the
    product's."""
    b_models = f"{WAITING},{WAITING_ON_B},{FLOWING},{TRICKLE}"
    a_env = None if relay_idle_s is None else {RELAY_IDLE_ENV: str(relay_idle_s)}
    nodes = [
        start_member(start_node, tmp_path, hosts[0], "a", "", a_env),  # no engine started
        start_member(start_node, tmp_path, hosts[1], "b", b_models),
    ]
    if members == 2:
        nodes.append(start_member(start_node, tmp_path, hosts[2], "c", WAITING))
    NamespaceBrokers.wait_until_serving(*nodes)
    async with _clients(*nodes) as clients:
        await clients[1].call(methods.SETTINGS_SET, {"values": {"node_name": B_NAME}})
        statuses = [await client.typed(methods.STATUS) for client in clients]
        engines = {"engine": "ollama"}
        await asyncio.gather(
            *(c.call(methods.ENGINE_START, engines, timeout=40) for c in clients[1:])
        )
        for node, client, status in zip(nodes[1:], clients[1:], statuses[1:], strict=True):
            await open_join_window(client)
            await _pair(clients[0], client, node.host.address, status.ports.node)
        ids = [status.node_id for status in statuses]
        cluster = Cluster(nodes, clients, ids, statuses[0].front_doors["ollama"])
        try:
            await until_listed(cluster, FLOWING, listed=True)
        except TimeoutError:
            roster = (await clients[0].typed(methods.CLUSTER_STATUS)).members
            known = await clients[0].typed(methods.DISCOVERY_GET_NODES)
            raise AssertionError(f"A never listed B's models: {roster}, {known}") from None
        yield cluster


async def open_join_window(client: Client) -> None:
    """Let ``client``'s node accept an invite (where invites are taken only while the user has
    opened "join a cluster"; elsewhere every invite is)."""
    with contextlib.suppress(errors.MethodNotFound):
        await client.call(JOIN_WINDOW, {"minutes": 10})


# --- the client, in A's namespace -----------------------------------------------------------


def on_host(host: Host, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``work`` on an event loop of its own in a thread that joined ``host``'s namespace."""
    results: list[T] = []
    failures: list[BaseException] = []

    def body() -> None:
        try:
            if host.namespace is not None:
                _join_network_namespace(host.namespace)
            results.append(asyncio.run(work()))
        except BaseException as failure:  # re-raised in the caller's thread
            failures.append(failure)

    thread = threading.Thread(target=body, name=f"client-on-{host.address}")
    thread.start()
    thread.join()
    if failures:
        raise failures[0]
    return results[0]


async def ask(
    door: str,
    model: str,
    *,
    stream: bool = False,
    tokens: int = 3,
    flowing: threading.Event | None = None,
) -> Seen:
    """POST ``/api/chat`` for ``model`` at ``door``; with ``flowing``, set it once the stream
    has carried a few lines. A client that gets nothing more for CLIENT_TIMEOUT_S gives up."""
    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    body["options"] = {"num_predict": tokens}
    lines: list[str] = []
    began = time.monotonic()
    response: httpx.Response | None = None
    async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as http:
        try:
            async with http.stream("POST", f"{door}/api/chat", json=body) as response:
                async for line in response.aiter_lines():
                    lines.append(line)
                    if flowing is not None and len(lines) == 5:
                        flowing.set()
        except httpx.TimeoutException:
            return Seen(0, None, tuple(lines), None)
        except httpx.TransportError as exc:  # cut after its last line: what it saw still counts
            if response is None:  # no answer at all: the door hung up on the client
                return Seen(-1, None, (f"{type(exc).__name__}: {exc}",), None)
    ended_at = time.monotonic()
    retry_after = response.headers.get("Retry-After")
    return Seen(response.status_code, retry_after, tuple(lines), ended_at - began, ended_at)


async def listed_models(door: str) -> set[str] | None:
    """The models A's door lists at ``/api/tags`` (None: no list in its answer)."""
    async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S) as http:
        try:
            answer = await http.get(f"{door}/api/tags")
        except httpx.TransportError:
            return None
    if answer.status_code != 200:
        return None
    return {entry["model"] for entry in answer.json()["models"]}


async def until_listed(cluster: Cluster, model: str, *, listed: bool) -> None:
    """Until A's door lists ``model`` (or, ``listed`` False, no longer does)."""
    host = cluster.nodes[0].host
    async with asyncio.timeout(ROUTING_TIMEOUT_S):
        while True:
            models = await asyncio.to_thread(on_host, host, lambda: listed_models(cluster.door))
            if models is not None and (model in models) == listed:
                return
            await asyncio.sleep(0.3)


async def ask_from_a(cluster: Cluster, model: str, **options: Any) -> Seen:
    """``ask`` at A's door from A's namespace, off this event loop."""
    host, door = cluster.nodes[0].host, cluster.door
    return await asyncio.to_thread(on_host, host, lambda: ask(door, model, **options))


async def until_running_on(client: Client, model: str) -> None:
    """Until a member's broker shows a job for ``model`` running (a request waits on it)."""
    await _until(
        client,
        methods.JOBS_GET_INITIAL,
        lambda s: any(j.model == model and j.state == "running" for j in s.jobs),
    )


def assert_unavailable_naming_b(seen: Seen, cluster: Cluster) -> None:
    """503 with ``Retry-After``, and the body names B."""
    assert seen.seconds is not None, f"no answer within {CLIENT_TIMEOUT_S:g} s: {seen.lines}"
    assert seen.status == 503, seen
    assert seen.retry_after is not None and int(seen.retry_after) > 0, seen
    text = "\n".join(seen.lines)
    assert B_NAME in text or cluster.ids[1] in text, text


def udp_reaches(sender: Host, receiver: Host) -> bool:
    """Whether a UDP datagram (as mDNS sends) from ``sender`` reaches ``receiver``."""
    got: list[bytes] = []
    port: list[int] = []
    ready = threading.Event()

    def listen() -> None:
        _join_network_namespace(str(receiver.namespace))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind((receiver.address, 0))
            sock.settimeout(10)
            port.append(sock.getsockname()[1])
            ready.set()
            with contextlib.suppress(TimeoutError):
                got.append(sock.recv(64))

    thread = threading.Thread(target=listen, name="udp-listener")
    thread.start()
    ready.wait(10)
    send = f"import socket; socket.socket(2, 2).sendto(b'x', ({receiver.address!r}, {port[0]}))"
    argv = ["ip", "netns", "exec", str(sender.namespace), sys.executable, "-c", send]
    subprocess.run(argv, check=True, capture_output=True, timeout=20)
    thread.join()
    return got == [b"x"]


# --- the tests ------------------------------------------------------------------------------


async def test_a_request_waiting_on_a_member_whose_route_dies_is_answered_503_naming_it(
    hosts: list[Host], start_node: Callable[..., Node], faults: LinkFaults, tmp_path: Path
) -> None:
    async with cluster_of(start_node, tmp_path, hosts, members=1) as cluster:
        a, b = cluster.nodes
        async with asyncio.TaskGroup() as group:
            waiting = group.create_task(ask_from_a(cluster, WAITING))
            await until_running_on(cluster.clients[1], WAITING)
            faults.blackhole(on=str(b.host.namespace), towards=a.host.address)
        assert_unavailable_naming_b(waiting.result(), cluster)
        # A's routing has dropped B: its models are no longer listed, a new request is 503.
        await until_listed(cluster, FLOWING, listed=False)
        assert_unavailable_naming_b(await ask_from_a(cluster, FLOWING), cluster)
        await _until(
            cluster.clients[0],
            methods.CLUSTER_STATUS,
            lambda s: any(m.node_id == cluster.ids[1] and m.state == "offline" for m in s.members),
        )


async def test_a_request_waiting_on_a_member_whose_route_dies_fails_over_to_another(
    hosts: list[Host], start_node: Callable[..., Node], faults: LinkFaults, tmp_path: Path
) -> None:
    async with cluster_of(start_node, tmp_path, hosts, members=2) as cluster:
        a, b, _ = cluster.nodes
        ca, cb, _ = cluster.clients
        await ca.call(methods.SETTINGS_SET, {"values": {"proxy_pinned_node": cluster.ids[1]}})
        await until_listed(cluster, WAITING, listed=True)
        async with asyncio.TaskGroup() as group:
            waiting = group.create_task(ask_from_a(cluster, WAITING))
            await until_running_on(cb, WAITING)
            faults.blackhole(on=str(b.host.namespace), towards=a.host.address)
        seen = waiting.result()
        assert seen.seconds is not None, f"no answer within {CLIENT_TIMEOUT_S:g} s"
        assert seen.status == 200 and seen.records[-1]["done"] is True, seen
        # The proxy worker reports the job's end a moment after the client has the answer.
        snapshot = await _until(
            ca,
            methods.JOBS_GET_INITIAL,
            lambda s: any(j.model == WAITING and j.state != "running" for j in s.jobs),
        )
        served = next(job for job in snapshot.jobs if job.model == WAITING)
        assert served.state == "completed" and served.serving == cluster.ids[2], served


async def test_a_stream_flowing_from_a_member_whose_route_dies_ends_with_an_error_record(
    hosts: list[Host], start_node: Callable[..., Node], faults: LinkFaults, tmp_path: Path
) -> None:
    async with cluster_of(start_node, tmp_path, hosts, members=1) as cluster:
        a, b = cluster.nodes
        flowing = threading.Event()
        async with asyncio.TaskGroup() as group:
            streaming = group.create_task(
                ask_from_a(cluster, FLOWING, stream=True, tokens=REPLY_TOKENS, flowing=flowing)
            )
            assert await asyncio.to_thread(flowing.wait, 60), "the stream never flowed"
            faults.blackhole(on=str(b.host.namespace), towards=a.host.address)
        seen = streaming.result()
        assert seen.seconds is not None, (
            f"the stream stayed open, silent, past {CLIENT_TIMEOUT_S:g} s"
        )
        records = seen.records
        assert seen.status == 200 and len(records) >= 5, seen
        assert not any(record.get("done") for record in records), "a dead stream ended clean"
        assert "error" in records[-1], records[-3:]


async def test_a_member_whose_route_comes_back_is_served_again(
    hosts: list[Host], start_node: Callable[..., Node], faults: LinkFaults, tmp_path: Path
) -> None:
    async with cluster_of(start_node, tmp_path, hosts, members=1) as cluster:
        a, b = cluster.nodes
        fault = faults.blackhole(on=str(b.host.namespace), towards=a.host.address)
        await until_listed(cluster, FLOWING, listed=False)
        faults.restore(fault)
        deadline = time.monotonic() + HEAL_TIMEOUT_S
        while (seen := await ask_from_a(cluster, FLOWING)).status != 200:
            assert seen.seconds is not None, "a request hung after the route came back"
            assert time.monotonic() < deadline, f"not served again in {HEAL_TIMEOUT_S:g} s: {seen}"
            await asyncio.sleep(0.5)
        assert seen.records[-1]["done"] is True


async def test_a_request_waiting_on_a_member_whose_link_goes_down_is_answered_503_naming_it(
    hosts: list[Host], start_node: Callable[..., Node], faults: LinkFaults, tmp_path: Path
) -> None:
    async with cluster_of(start_node, tmp_path, hosts, members=1) as cluster:
        b = cluster.nodes[1]
        async with asyncio.TaskGroup() as group:
            waiting = group.create_task(ask_from_a(cluster, WAITING))
            await until_running_on(cluster.clients[1], WAITING)
            down = faults.link_down(str(b.host.namespace))
        assert_unavailable_naming_b(waiting.result(), cluster)
        faults.restore(down)
        deadline = time.monotonic() + HEAL_TIMEOUT_S
        while (seen := await ask_from_a(cluster, FLOWING)).status != 200:
            assert time.monotonic() < deadline, f"not served after the link came up: {seen}"
            await asyncio.sleep(0.5)


async def test_a_member_heard_over_mdns_but_unreachable_over_tcp_is_not_routed_to(
    hosts: list[Host], start_node: Callable[..., Node], faults: LinkFaults, tmp_path: Path
) -> None:
    async with cluster_of(start_node, tmp_path, hosts, members=1) as cluster:
        a, b = cluster.nodes
        faults.tcp_blackhole(on=str(b.host.namespace), towards=a.host.address)
        # Asked at once, before anything has noticed: answered, not sent to B to hang there.
        assert_unavailable_naming_b(await ask_from_a(cluster, FLOWING), cluster)
        assert await asyncio.to_thread(udp_reaches, b.host, a.host), "B's UDP (mDNS) is cut too"
        await until_listed(cluster, FLOWING, listed=False)
        # B keeps announcing itself (its UDP is untouched) while A keeps asking: not once is
        # a request sent its way, to hang there.
        for _ in range(4):
            assert_unavailable_naming_b(await ask_from_a(cluster, FLOWING), cluster)
            await asyncio.sleep(2)


async def test_a_slow_engine_behind_a_live_link_is_not_cut(
    hosts: list[Host], start_node: Callable[..., Node], faults: LinkFaults, tmp_path: Path
) -> None:
    async with cluster_of(start_node, tmp_path, hosts, 1, RELAY_IDLE_S) as cluster:
        assert_slow_but_whole(await ask_from_a(cluster, TRICKLE, stream=True, tokens=2))


async def test_latency_and_a_slow_engine_are_slow_not_dead(
    hosts: list[Host], start_node: Callable[..., Node], faults: LinkFaults, tmp_path: Path
) -> None:
    reason = netem_unavailable()
    if reason is not None:
        pytest.skip(reason)
    async with cluster_of(start_node, tmp_path, hosts, 1, RELAY_IDLE_S) as cluster:
        faults.netem(str(cluster.nodes[1].host.namespace), delay_ms=300)
        assert_slow_but_whole(await ask_from_a(cluster, TRICKLE, stream=True, tokens=2))


def assert_slow_but_whole(seen: Seen) -> None:
    """A stream of two tokens, TRICKLE_GAP_S apart, that ended with ``done`` and no error."""
    assert seen.status == 200 and seen.seconds is not None, seen
    records = seen.records
    assert records[-1].get("done") is True and not any("error" in r for r in records), records
    assert len(records) == 3  # two tokens and done
