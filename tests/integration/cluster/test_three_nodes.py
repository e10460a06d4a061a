"""Three computers become one cluster: A invites B, B invites C, A trusts C through the roster, a
request at A's Ollama door is served by C's engine over mutual TLS and fails over to B when C's
engine dies before the first byte; a wrong PIN ends its invite; a non-member gets 403; a removed
node stays removed after restarts; leave works.

The hosts are Linux network namespaces on a bridge (real addresses, real mDNS, real TLS between
them); where namespaces cannot be made, three loopback addresses (127.0.0.2-4) stand in, with
the nodes added by address instead of mDNS, so the suite never skips this.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from backend.protocol import methods
from backend.protocol.types.cluster import InviteAnswer, InviteParams, JoinWindowParams
from tests.integration.conftest import (
    ROOT,
    Broker,
    Client,
    node_argv,
    stop_all,
    wait_until_serving,
)
from tests.integration.discovery.test_manual_nodes import FAST
from tests.integration.discovery.test_multicast_netns import _ip, _netns_available
from tests.integration.engines.conftest import OLLAMA_SHIM, write_override, write_script
from tests.support.ports import worker_index

MODEL = "shared-bc:latest"  # on B and C, not on A


@dataclass(frozen=True)
class Host:
    """Where a node runs: a namespace (None: this computer) and the address peers use."""

    namespace: str | None
    address: str


@pytest.fixture
def hosts() -> Iterator[list[Host]]:
    """Three hosts: namespaces 10.78.N.11-13 (N: the xdist worker) on a private bridge, or
    127.0.0.2-4."""
    if os.environ.get("PAIR_TEST_NO_NETNS") or _netns_available() is not None:
        yield [Host(None, f"127.0.0.{n}") for n in (2, 3, 4)]
        return
    # Random, not the PID: another run (a PID that shares its last digits) may hold a name.
    tag = secrets.token_hex(3)
    bridge = f"pcb{tag}"
    made: list[Host] = []
    _remove_leftovers()
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("link", "set", bridge, "type", "bridge", "mcast_snooping", "0")
        _ip("link", "set", "dev", bridge, "alias", f"{OWNER_ALIAS}{os.getpid()}")
        _ip("addr", "add", f"{bridge_address()}/24", "dev", bridge)  # the test talks to them
        _ip("link", "set", bridge, "up")
        for index in (1, 2, 3):
            made.append(_namespace(tag, bridge, index))
        yield made
    finally:
        for host in made:
            subprocess.run(["ip", "netns", "del", str(host.namespace)], capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=10)


# A test bridge names the PID of the test process that made it (its link alias).
OWNER_ALIAS = "pair-test-pid="
_chosen_subnet: list[str] = []
_claims: list[int] = []  # the subnet locks this process holds (open descriptors)


def _remove_leftovers() -> None:
    """Delete what a run that was killed mid-test left on this process's subnet: its bridge
    (which would make the host's route to the subnet ambiguous) and its namespaces. A killed
    run never reaches the fixture's clean-up, and the kernel keeps both until deleted."""
    holder = _bridge_on(_subnet())
    if holder is not None and _is_stale(holder):
        _remove_bridge(holder)


def _bridge_on(subnet: str) -> str | None:
    """The test bridge holding ``subnet``'s host address, if any."""
    shown = subprocess.run(
        ["ip", "-o", "-4", "addr", "show", "to", f"{subnet}.1/32"],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout
    names = [line.split()[1] for line in shown.splitlines()]
    return next((name for name in names if name.startswith("pcb")), None)


def _is_stale(bridge: str) -> bool:
    """Whether ``bridge`` was left by a test process that is gone (or by this one); a bridge of
    another live test run (a second pytest on this machine) is not."""
    shown = subprocess.run(
        ["ip", "-o", "link", "show", "dev", bridge], capture_output=True, text=True, timeout=10
    ).stdout
    words = shown.split()
    alias = words[words.index("alias") + 1] if "alias" in words[:-1] else ""
    owner = alias.removeprefix(OWNER_ALIAS)
    if not alias.startswith(OWNER_ALIAS) or not owner.isdigit():
        return True
    return int(owner) == os.getpid() or not psutil.pid_exists(int(owner))


def _remove_bridge(bridge: str) -> None:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for name in (entry.split()[0] for entry in names.splitlines() if entry.strip()):
        if name.startswith(f"pcns{bridge[3:]}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
    subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=10)


def _subnet() -> str:
    """This test process's own /24: the host has an address on the bridge, and two bridges
    with one subnet at once would leave the host's route to it ambiguous. The xdist worker's
    number picks it, unless another live test process holds that one (then the next free one).

    A process holds its subnet from its first choice to its exit by a lock on a file named
    after it (``_claim``): a bridge exists only while a test runs, so two test runs on one
    machine (each worker 0 starting from 10.78.0) could each find the subnet free between
    the other's tests, and then both put a bridge on it."""
    if not _chosen_subnet:
        index, count = worker_index()
        for step in range(32):
            subnet = f"10.78.{(index + step * count) % 250}"
            if not _claim(subnet):
                continue  # another live test process chose it
            holder = _bridge_on(subnet)
            if holder is None or _is_stale(holder):
                break
        else:
            raise RuntimeError("no free test subnet in 10.78.0.0/16: other test runs hold them")
        _chosen_subnet.append(subnet)
    return _chosen_subnet[0]


def _claim(subnet: str) -> bool:
    """Lock ``subnet``'s file for the rest of this process (the kernel lets go when it exits,
    killed or not); False when another process holds it."""
    import fcntl  # POSIX only: namespaces are Linux's

    path = Path(tempfile.gettempdir()) / f"pair-test-subnet-{subnet}.lock"
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return False
    _claims.append(descriptor)  # kept open: the lock lasts as long as this process
    return True


def bridge_address() -> str:
    """The host's address on the bridge (where the hosts reach this test's servers)."""
    return f"{_subnet()}.1"


def _namespace(tag: str, bridge: str, index: int) -> Host:
    namespace, address = f"pcns{tag}{index}", f"{_subnet()}.{10 + index}"
    _ip("netns", "add", namespace)
    try:
        _wire(namespace, address, bridge, f"{tag}{index}")
    except BaseException:
        # Not yet in the fixture's list: removed here, or it outlives the run.
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=10)
        raise
    return Host(namespace, address)


def _wire(namespace: str, address: str, bridge: str, suffix: str) -> None:
    """Give ``namespace`` an end of a veth pair on ``bridge``, at ``address``, with multicast."""
    host_end, inner_end = f"pch{suffix}", f"pcn{suffix}"
    _ip("link", "add", host_end, "type", "veth", "peer", "name", inner_end)
    _ip("link", "set", inner_end, "netns", namespace)
    _ip("link", "set", host_end, "master", bridge)
    _ip("link", "set", host_end, "up")
    _ip("-n", namespace, "link", "set", inner_end, "name", "eth0")
    _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
    _ip("-n", namespace, "link", "set", "eth0", "up")
    _ip("-n", namespace, "link", "set", "lo", "up")
    _ip("-n", namespace, "route", "add", "224.0.0.0/4", "dev", "eth0")


@dataclass
class Node:
    """A broker this test started on a host."""

    host: Host
    broker: Broker
    data_dir: Path
    argv: list[str]


@pytest.fixture
def start_node(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    started: list[Node] = []

    def start(
        host: Host,
        name: str,
        models: str,
        *,
        override: dict[str, Any] | None = None,
        again: Node | None = None,
        wait: bool = True,
    ) -> Node:
        """A broker on ``host`` whose Ollama is the emulator with ``models`` (or ``override``);
        ``again``: the same node started again, on the same ports; ``wait`` False: started, not
        yet serving (``serving`` waits for several, whose starts then overlap)."""
        data_dir = tmp_path / name
        if again is None:
            shim_text = OLLAMA_SHIM.replace('"tinyllama:latest,qwen2:0.5b"', repr(models))
            shim = write_script(tmp_path / f"ollama-{name}", shim_text)
            runtime = {"port": _free_port_on(host), "ready": {"timeout_s": 30}}
            document = override or {"detect": [{"path": str(shim)}], "runtime": runtime}
            write_override(data_dir, "ollama", document)
        env = {**os.environ, **FAST, "PAIR_PROXY_RETRY_BACKOFF_S": "0.05,0.1"}
        if again is not None:
            argv = again.argv
            if host.namespace is None:
                env["PAIR_DISCOVERY_MDNS"] = "0"
            else:
                env.pop("PAIR_DISCOVERY_MDNS", None)
        elif host.namespace is None:
            env["PAIR_DISCOVERY_MDNS"] = "0"
            argv = node_argv(data_dir)
        else:
            env.pop("PAIR_DISCOVERY_MDNS", None)
            argv = ["ip", "netns", "exec", host.namespace, *node_argv(data_dir)]
        stderr_path = tmp_path / f"{name}-{len(started)}.stderr"
        with stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                argv,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
            )
        node = Node(host, Broker(process, data_dir, stderr_path), data_dir, argv)
        started.append(node)
        if wait:
            wait_until_serving(node.broker)
        return node

    yield start
    stop_all([node.broker for node in started])


def serving(*nodes: Node) -> tuple[Node, ...]:
    """``nodes`` (started with ``wait=False``), once each serves."""
    for node in nodes:
        wait_until_serving(node.broker)
    return nodes


def _free_port_on(_: Host) -> int:
    from tests.integration.conftest import free_port

    return free_port()


async def _pair(inviter: Client, joiner: Client, address: str, port: int) -> None:
    await joiner.typed(methods.CLUSTER_OPEN_JOIN_WINDOW, JoinWindowParams())
    created = await inviter.typed(methods.CLUSTER_INVITE, InviteParams(address=address, port=port))
    assert created.invite.state == "pending", created.invite.reason
    answer = InviteAnswer(id=created.invite.id, pin=created.pin)
    ended = await joiner.typed(methods.CLUSTER_ACCEPT, answer, timeout=30)
    assert ended.state == "paired", ended.reason


async def _until(
    client: Client, method: Any, check: Callable[[Any], bool], timeout: float = 30.0
) -> Any:
    """The first answer of ``method`` that passes ``check``, asked every 50 ms (a call on the
    control socket costs the broker little; a slower poll only adds to each wait)."""
    async with asyncio.timeout(timeout):
        while True:
            answer = await client.typed(method)
            if check(answer):
                return answer
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _clients(*nodes: Node) -> AsyncIterator[list[Client]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(node.broker.connect()) for node in nodes]


async def test_three_nodes_pair_trust_through_the_roster_and_serve_across(
    hosts: list[Host], start_node: Callable[..., Node]
) -> None:
    a, b, c = serving(
        start_node(hosts[0], "a", "only-a:latest", wait=False),
        start_node(hosts[1], "b", f"{MODEL},only-b:latest", wait=False),
        start_node(hosts[2], "c", MODEL, wait=False),
    )
    async with _clients(a, b, c) as (ca, cb, cc):
        await asyncio.gather(
            *(c.call(methods.ENGINE_START, {"engine": "ollama"}, timeout=40) for c in (ca, cb, cc))
        )
        status = [await client.typed(methods.STATUS) for client in (ca, cb, cc)]
        a_id, b_id, c_id = (s.node_id for s in status)
        await _pair(ca, cb, b.host.address, status[1].ports.node)
        await _pair(cb, cc, c.host.address, status[2].ports.node)
        # A never met C: it trusts C through B's endorsement in the roster.
        await _until(ca, methods.CLUSTER_STATUS, lambda s: c_id in [m.node_id for m in s.members])
        await _until(cc, methods.CLUSTER_STATUS, lambda s: a_id in [m.node_id for m in s.members])
        if a.host.namespace is None:  # no mDNS on loopback: A learns the others by address
            for node, st in ((b, status[1]), (c, status[2])):
                params = {"address": node.host.address, "port": st.ports.node}
                await ca.call(methods.NODE_ADD, params)

        # A request at A for a model only B and C have is served by C when A is pinned to C.
        await ca.call(methods.SETTINGS_SET, {"values": {"proxy_pinned_node": c_id}})
        door = status[0].front_doors["ollama"]
        # (B may serve the first ones, until A's routing table has caught up with the roster.)
        async with asyncio.timeout(40):
            while True:
                await _chat_until_served(a.host, door)
                if await _last_serving(ca) == c_id:
                    break
                await asyncio.sleep(0.3)

        # C's engine dies; the next request fails over (before the first byte) to B.
        c_engine = await cc.typed(methods.ENGINE_STATUS, {"engine": "ollama"})
        assert c_engine.pid is not None
        os.kill(c_engine.pid, signal.SIGKILL)
        assert _chat(a.host, door) == 0, "failed over to B"
        assert await _last_serving(ca) == b_id


# The official client, run where A's front door is (loopback inside A's host): exit 0 when the
# answer is complete, 4 when the model is not routable yet.
_CHAT = """
import sys, ollama
try:
    answer = ollama.Client(host=sys.argv[1]).chat(
        model=sys.argv[2], messages=[{"role": "user", "content": "hi"}])
except ollama.ResponseError as exc:
    sys.exit(4 if exc.status_code in (404, 503) else 1)
sys.exit(0 if answer.done and answer.message.content else 1)
"""


def _chat(host: Host, door: str) -> int:
    argv = [sys.executable, "-c", _CHAT, door, MODEL]
    if host.namespace is not None:
        argv = ["ip", "netns", "exec", host.namespace, *argv]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=60).returncode


async def _chat_until_served(host: Host, door: str) -> None:
    async with asyncio.timeout(40):
        while (code := await asyncio.to_thread(_chat, host, door)) == 4:
            await asyncio.sleep(0.3)
    assert code == 0


async def _last_serving(client: Client) -> str | None:
    snapshot = await client.typed(methods.JOBS_GET_INITIAL, {"limit": 5})
    return snapshot.jobs[0].serving


async def test_a_non_member_gets_403_on_member_routes_and_no_requests(
    hosts: list[Host], start_node: Callable[..., Node]
) -> None:
    a = start_node(hosts[0], "a", "only-a:latest")
    async with a.broker.connect() as ca:
        port = (await ca.typed(methods.STATUS)).ports.node
    async with httpx.AsyncClient(verify=False, timeout=5) as http:  # no client certificate
        for path in ("/v1/cluster/roster", "/v1/cluster/members/remove", "/v1/cluster/x"):
            response = await http.post(f"https://{a.host.address}:{port}{path}", content=b"{}")
            assert response.status_code == 403, path
        # The member link (cluster services: engines, models, errors, jobs) likewise.
        link = await http.get(
            f"https://{a.host.address}:{port}/v1/cluster/link",
            headers={"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                     "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="},
        )  # fmt: skip
        assert link.status_code == 403
        info = await http.get(f"https://{a.host.address}:{port}/v1/node-info")
        assert info.status_code == 200, "node-info stays public"
        # Its inventories do not: from another host (a namespace's bridge) they are left out;
        # on loopback addresses this test runs on A's own computer, which sees them.
        assert ("engines" in info.json()) == (a.host.namespace is None)


async def test_a_removed_node_stays_removed_after_both_restart(
    hosts: list[Host], start_node: Callable[..., Node]
) -> None:
    a, b = serving(
        start_node(hosts[0], "a", "only-a:latest", wait=False),
        start_node(hosts[1], "b", "only-b:latest", wait=False),
    )
    async with _clients(a, b) as (ca, cb):
        b_status = await cb.typed(methods.STATUS)
        await _pair(ca, cb, b.host.address, b_status.ports.node)
        await ca.call(methods.CLUSTER_REMOVE, {"node_id": b_status.node_id})
        await _until(cb, methods.CLUSTER_STATUS, lambda s: s.cluster_id is None)
    stop_all([a.broker, b.broker])
    a2, b2 = serving(
        start_node(a.host, "a", "only-a:latest", wait=False),
        start_node(b.host, "b", "only-b:latest", wait=False),
    )
    async with _clients(a2, b2) as (ca, cb):
        assert not (await ca.typed(methods.CLUSTER_STATUS)).members
        assert (await cb.typed(methods.CLUSTER_STATUS)).cluster_id is None
