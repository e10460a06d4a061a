"""Windows' listener hand-over run for real on this OS: the real proxy worker, started with
``--shared`` names and no descriptor for any listener, gets each socket over its RPC channel
(``proxy:take-listener``) and serves a real request on it, and a door that moves goes the same
way. On Windows everything is real; elsewhere only the one Windows call is stood in for:
``socket.share`` sends the socket over a side channel the worker inherits (as the real one
duplicates it into the worker), and the worker's ``fromshare`` takes it from there."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import httpx
import psutil
import pytest

from backend.components.proxy.component import ProxyComponent
from backend.components.proxy.handover import (
    SharedHandover,
    WorkerLink,
    WorkerStart,
    system_share,
)
from backend.components.proxy.listeners import Listener
from backend.core.clock import SystemClock
from backend.core.supervisor import Supervisor
from backend.protocol import methods
from backend.protocol.proxy import Door, ProxyTargets
from backend.workers.proxy.service import BACKOFF_ENV
from tests.fakes import RecordingErrors
from tests.integration.proxy.conftest import (
    LOCAL_NODE,
    QUICK_RESTARTS,
    RunningProxy,
    credentials_for,
    free_port,
    free_ports,
    local,
)
from tests.integration.proxy.test_door_ports_runtime import refused, tags

WINDOWS = sys.platform == "win32"
pytestmark = pytest.mark.skipif(
    not WINDOWS and not hasattr(socket, "send_fds"), reason="the stand-in needs SCM_RIGHTS"
)

CHANNEL_ENV = "PAIR_TEST_SHARE_FD"
MODELS = ["llama3.2:latest"]
HOLD_BACK_S = 1.5  # more than ProxyComponent's heartbeat interval (1 s)
# The real worker entry point with the stand-in ``fromshare``: the bytes name the socket that
# the broker's stand-in ``share`` sent over the side channel just before.
WORKER = f"""
import os, socket, sys
from backend.workers.proxy.__main__ import main
channel = socket.socket(fileno=int(os.environ["{CHANNEL_ENV}"]))
def fromshare(data):
    message, fds, _, _ = socket.recv_fds(channel, 64, 1)
    assert message == data, (message, data)
    return socket.socket(fileno=fds[0])
sys.exit(main(sys.argv[1:], fromshare=fromshare))
"""


@dataclass
class SideChannelSharing:
    """``SharedHandover`` with ``socket.share`` stood in for (the real one on Windows, where
    there is no side channel); records each share. The delivery at a start is held back for
    longer than a heartbeat interval after the worker answers, so a readiness that did not
    wait for it would show."""

    ours: socket.socket | None
    theirs: socket.socket | None
    shared: list[tuple[int, int]] = field(default_factory=list)  # (worker PID, port)
    delivered: bool = False
    inner: SharedHandover = field(init=False)

    def __post_init__(self) -> None:
        self.inner = SharedHandover(self.share)

    def share(self, sock: socket.socket, pid: int) -> bytes:
        self.shared.append((pid, int(sock.getsockname()[1])))
        if self.ours is None:
            return system_share(sock, pid)
        token = f"{pid}:{sock.fileno()}".encode()
        socket.send_fds(self.ours, [token], [sock.fileno()])
        return token

    @property
    def delivers_after_start(self) -> bool:
        return self.inner.delivers_after_start

    def start(self, doors: Mapping[Door, Listener], relay: Listener | None) -> WorkerStart:
        start = self.inner.start(doors, relay)
        if self.theirs is None:
            return start
        return WorkerStart(start.argv, (*start.pass_fds, self.theirs.fileno()))

    async def deliver(
        self, worker: WorkerLink, doors: Mapping[Door, Listener], relay: Listener | None
    ) -> None:
        # Once the worker answers, a heartbeat would be answered within a second.
        await worker.call(methods.PING.name, timeout=30)
        await asyncio.sleep(HOLD_BACK_S)
        await self.inner.deliver(worker, doors, relay)
        self.delivered = True

    async def hand_over(self, worker: WorkerLink, door: Door, listener: Listener) -> None:
        await self.inner.hand_over(worker, door, listener)

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
async def sharing() -> AsyncIterator[SideChannelSharing]:
    if WINDOWS:
        yield SideChannelSharing(None, None)
        return
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield SideChannelSharing(ours, theirs)
    ours.close()
    theirs.close()


async def start_sharing_proxy(
    sharing: SideChannelSharing, emulator: str
) -> AsyncIterator[RunningProxy]:
    errors, clock = RecordingErrors(), SystemClock()
    environment = {BACKOFF_ENV: "0.05,0.1"}
    command = None  # on Windows: the worker as the broker starts it, real fromshare and all
    if sharing.theirs is not None:
        environment[CHANNEL_ENV] = str(sharing.theirs.fileno())
        command = [sys.executable, "-c", WORKER]
    component = ProxyComponent(
        ports=free_ports(),
        errors=errors,
        clock=clock,
        targets=lambda: proxy.targets,
        credentials=credentials_for(LOCAL_NODE),
        environment=lambda: environment,
        host="127.0.0.1",
        targets_interval=0.05,
        handover=sharing,
        worker_command=command,
    )
    proxy = RunningProxy(
        component=component,
        supervisor=Supervisor(errors=errors, clock=clock, policy=QUICK_RESTARTS),
        errors=errors,
        targets=ProxyTargets(node_id=LOCAL_NODE, engines={"ollama": [local(emulator, MODELS)]}),
    )
    proxy.supervisor.add(component)
    proxy.supervisor.start()
    try:
        yield proxy
    finally:
        await component.close_front_doors()
        await proxy.supervisor.stop(grace=5.0)


@pytest.fixture
async def proxy(sharing: SideChannelSharing, ollama_emulator: str) -> AsyncIterator[RunningProxy]:
    async for running in start_sharing_proxy(sharing, ollama_emulator):
        yield running


async def wait_ready(proxy: RunningProxy, sharing: SideChannelSharing) -> bool:
    """Wait until the proxy counts as ready; whether every listener had been delivered, as
    seen at the first moment it did."""
    async with asyncio.timeout(30):
        while True:
            info = next(i for i in proxy.supervisor.snapshot() if i.name == "proxy")
            if info.status == "running":
                return sharing.delivered
            await asyncio.sleep(0.005)


async def test_the_worker_serves_listeners_shared_over_its_rpc(
    proxy: RunningProxy, sharing: SideChannelSharing
) -> None:
    assert await wait_ready(proxy, sharing), "ready only once it holds every listener"
    pid = proxy.component.pid()
    assert pid is not None
    argv = psutil.Process(pid).cmdline()
    assert "--fd" not in argv and "--relay-fd" not in argv and "--handover-fd" not in argv
    assert argv.count("--shared") == 4

    ports = proxy.component.ports()
    relay = proxy.component.relay_port()
    assert sharing.shared == [(pid, ports[door]) for door in ports] + [(pid, relay)]
    assert await tags(ports["ollama"]) == ["llama3.2:latest", "qwen2.5:latest"]


async def test_a_door_that_moves_is_shared_the_same_way(
    proxy: RunningProxy, sharing: SideChannelSharing
) -> None:
    await wait_ready(proxy, sharing)
    await proxy.wait_table()
    before, pid = proxy.component.ports()["ollama"], proxy.component.pid()
    assert await tags(before) == ["llama3.2:latest", "qwen2.5:latest"]

    wanted = free_port()
    await proxy.component.move_doors({"ollama": wanted})

    assert sharing.shared[-1] == (pid, wanted)
    assert await tags(wanted) == ["llama3.2:latest", "qwen2.5:latest"]
    assert await refused(before), "the old port no longer accepts"
    assert proxy.component.pid() == pid, "the worker was not restarted"


async def test_a_request_through_the_shared_door_reaches_the_engine(
    proxy: RunningProxy, sharing: SideChannelSharing
) -> None:
    await wait_ready(proxy, sharing)
    await proxy.wait_table()
    url = proxy.url("ollama")
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        body = {"model": "llama3.2", "prompt": "hi", "stream": False}
        answer = await client.post("/api/generate", json=body)
    assert answer.status_code == 200 and answer.json()["done"] is True
