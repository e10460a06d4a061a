"""A ProxyComponent under a real Supervisor (real clock), its worker a real child process."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from backend.common.certificates import NodeCredentials
from backend.components.identity.certificate import mint
from backend.components.proxy.component import ProxyComponent
from backend.core.clock import SystemClock
from backend.core.restart_policy import RestartPolicy
from backend.core.supervisor import Supervisor
from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.ollama import build_ollama_app
from backend.devtools.emulators.ollama_state import OllamaConfig
from backend.devtools.emulators.server import EmulatorServer
from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from backend.workers.proxy.service import BACKOFF_ENV
from tests.fakes import RecordingErrors
from tests.support.ports import free_port

# Asserts inside the conformance helpers report their operands like asserts in test files.
pytest.register_assert_rewrite("tests.integration.proxy.conformance")

QUICK_RESTARTS = RestartPolicy(backoff=(0.5, 0.5, 0.5, 0.5, 0.5))


LOCAL_NODE = "node-local"


@functools.cache
def credentials_for(node_id: str) -> NodeCredentials:
    """One identity per node id for the whole session (minting takes a few milliseconds)."""
    return mint(NodeId(node_id))


@dataclass
class RunningProxy:
    """A supervised proxy: its component, the errors it raised, and the table it routes by.

    Assign ``targets`` to change the table; the worker gets it within 50 ms (on an idle
    machine: ``wait_table`` waits until it has it): the assignment tells the component, as the
    broker's sources do (``look_now``), so a table at rest is looked at once.
    """

    component: ProxyComponent
    supervisor: Supervisor
    errors: RecordingErrors
    targets: ProxyTargets = field(default_factory=ProxyTargets)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    credentials: NodeCredentials = field(default_factory=lambda: credentials_for(LOCAL_NODE))

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "targets" and "component" in self.__dict__:
            self.component.look_now()

    def events(self, key: str | None = None) -> list[dict[str, Any]]:
        """Job events received so far (of one job), in arrival order."""
        return [e for e in self.jobs if key is None or e["key"] == key]

    def keys(self) -> list[str]:
        """Job keys in the order the jobs appeared."""
        return list(dict.fromkeys(e["key"] for e in self.jobs))

    async def wait_keys(self, count: int, timeout: float = 10.0) -> list[str]:
        """The job keys once at least ``count`` jobs have reported (the worker sends job
        events in batches, within 50 ms)."""
        async with asyncio.timeout(timeout):
            while len(keys := self.keys()) < count:
                await asyncio.sleep(0.005)
        return keys

    async def wait_job(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0
    ) -> dict[str, Any]:
        """The first job event matching ``predicate`` (waiting for it)."""
        async with asyncio.timeout(timeout):
            while True:
                for event in self.jobs:
                    if predicate(event):
                        return event
                await asyncio.sleep(0.01)

    async def wait_table(self, timeout: float = 15.0) -> None:
        """Wait until the worker routes by ``targets`` as assigned now."""
        async with asyncio.timeout(timeout):
            await self.component.table_applied()

    def url(self, door: str) -> str:
        """The door's real URL."""
        return self.component.endpoints()[door]  # type: ignore[index]

    def relay_url(self) -> str:
        """The relay listener's URL (mutual TLS)."""
        return f"https://127.0.0.1:{self.component.relay_port()}"

    def as_peer(self, node_id: str, models: list[str]) -> RouteTarget:
        """The target another node's table lists for this one: its relay, pinned."""
        return RouteTarget(
            node_id=node_id,
            kind="peer",
            base_url=self.relay_url(),
            models=models,
            cert_der=self.credentials.cert_der,
        )

    async def wait_serving(self, timeout: float = 15.0) -> int:
        """Wait until the worker answers heartbeats; its PID."""
        async with asyncio.timeout(timeout):
            while True:
                info = next(i for i in self.supervisor.snapshot() if i.name == "proxy")
                pid = self.component.pid()
                if info.status == "running" and pid is not None:
                    return pid
                await asyncio.sleep(0.02)


StartProxy = Callable[..., Awaitable[RunningProxy]]


@pytest.fixture
async def start_proxy() -> AsyncIterator[StartProxy]:
    """Start proxies on free ports; each is stopped (doors closed first) at teardown."""
    running: list[RunningProxy] = []

    async def start(
        ports: Ports | None = None,
        environment: dict[str, str] | None = None,
        node_id: str = LOCAL_NODE,
        **engines: RouteTarget,
    ) -> RunningProxy:
        """Start a proxy whose table holds ``engines`` (engine name: this node's target);
        ``node_id`` picks its identity (``credentials_for``)."""
        errors = RecordingErrors()
        clock = SystemClock()
        proxy = RunningProxy(
            component=ProxyComponent(
                ports=ports or free_ports(),
                errors=errors,
                clock=clock,
                targets=lambda: proxy.targets,
                credentials=credentials_for(node_id),
                on_job=lambda event: proxy.jobs.append(event),
                environment=lambda: {BACKOFF_ENV: "0.05,0.1", **(environment or {})},
                host="127.0.0.1",
                targets_interval=0.05,
            ),
            supervisor=Supervisor(errors=errors, clock=clock, policy=QUICK_RESTARTS),
            errors=errors,
            targets=ProxyTargets(
                node_id=node_id, engines={name: [t] for name, t in engines.items()}
            ),
            credentials=credentials_for(node_id),
        )
        running.append(proxy)
        proxy.supervisor.add(proxy.component)
        proxy.supervisor.start()
        await proxy.wait_serving()
        return proxy

    yield start
    for proxy in running:
        await proxy.component.close_front_doors()
        await proxy.supervisor.stop(grace=5.0)


def local(base_url: str, models: list[str], *, slots: int = 1) -> RouteTarget:
    """This node's own engine at ``base_url`` listing ``models``."""
    return RouteTarget(
        node_id=LOCAL_NODE, kind="local", base_url=base_url, models=models, slots=slots
    )


async def generate(proxy: RunningProxy, *, tokens: int, timeout: float) -> int:
    """Send one Ollama ``/api/generate`` for model ``m`` through ``proxy``'s door, asking for
    ``tokens`` tokens; the answer's status once it is read in full."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            proxy.url("ollama") + "/api/generate",
            json={"model": "m", "prompt": "go", "options": {"num_predict": tokens}},
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response,
    ):
        await response.read()
        return response.status


def free_ports() -> Ports:
    """Free ports for every listener (never PAIR's defaults)."""
    return Ports(
        node=free_port(),
        ollama=free_port(),
        openai=free_port(),
        llamacpp=free_port(),
        relay=free_port(),
    )


@pytest.fixture
async def ollama_emulator() -> AsyncIterator[str]:
    """An Ollama emulator with llama3.2 and qwen2.5 installed; its base URL."""
    timing = TimingModel(load_delay=0.01, token_delay=0.002)
    server = EmulatorServer(
        build_ollama_app(OllamaConfig(models=("llama3.2", "qwen2.5"), timing=timing))
    )
    await server.start()
    yield server.url
    await server.stop()
