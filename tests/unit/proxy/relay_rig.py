"""Node B's relay in-process over real TLS, serving its Ollama emulator, with node A pinned: the
setup the relay tests share."""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import msgspec
from aiohttp import web

from backend.common import tls
from backend.common.certificates import NodeCredentials
from backend.components.identity.certificate import mint
from backend.components.proxy.component import identity_payload
from backend.devtools.emulators.ollama import build_ollama_app
from backend.devtools.emulators.ollama_state import OllamaConfig
from backend.devtools.emulators.server import EmulatorServer
from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.protocol.types.base import NodeId
from backend.protocol.types.jobs import JobEvent
from backend.workers.proxy.channels.jobs import JobLog
from backend.workers.proxy.context import DoorContext
from backend.workers.proxy.relay.app import build_relay_app
from backend.workers.proxy.relay.peer_tls import PeerTls, credentials_from
from backend.workers.proxy.relay.serving import RelayBoard
from tests.fakes import FakeClock
from tests.unit.proxy.scripted_door import make_router

NODE_A = mint(NodeId("node-a"))
NODE_B = mint(NodeId("node-b"))


@dataclass
class Relay:
    """Node B: its relay's URL, its trust, its door context and its engine."""

    url: str
    peer_tls: PeerTls
    context: DoorContext
    local: RouteTarget
    jobs: list[dict[str, object]]

    def trust(self, *ders: bytes) -> None:
        targets = table(self.local, ders)
        self.peer_tls.follow(targets)
        self.context.router.update(targets)


def table(local: RouteTarget, trusted: tuple[bytes, ...]) -> ProxyTargets:
    """Node B's routing table: ``local`` serves Ollama, ``trusted`` are pinned."""
    return ProxyTargets(node_id="node-b", engines={"ollama": [local]}, trusted=list(trusted))


def client_of(credentials: NodeCredentials) -> ssl.SSLContext:
    """Mutual TLS to node B as the holder of ``credentials``."""
    return tls.client_context(credentials, NODE_B.cert_der)


@contextlib.asynccontextmanager
async def serving_relay(config: OllamaConfig) -> AsyncIterator[Relay]:
    """Node B's relay on a loopback port, its emulator configured by ``config``, A trusted."""
    engine = EmulatorServer(build_ollama_app(config))
    await engine.start()
    peer_tls = PeerTls()
    peer_tls.adopt_identity(credentials_from(identity_payload(NODE_B)))
    jobs: list[dict[str, object]] = []

    def sent(events: list[JobEvent]) -> None:
        jobs.extend(msgspec.to_builtins(event) for event in events)

    async with aiohttp.ClientSession() as session:
        router = make_router(session, JobLog(sent), clock=FakeClock(), peer_tls=peer_tls)
        local = RouteTarget(
            node_id="node-b", kind="local", base_url=engine.url, models=["llama3.2:latest"]
        )
        context = DoorContext("ollama", router, RelayBoard())
        served = Relay("", peer_tls, context, local, jobs)
        served.trust(NODE_A.cert_der)
        runner = web.AppRunner(
            build_relay_app({"ollama": context}, context.board, peer_tls),
            handler_cancellation=True,
        )
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        site = web.SockSite(runner, sock, ssl_context=peer_tls.server_context())
        await site.start()
        served.url = f"https://127.0.0.1:{sock.getsockname()[1]}"
        try:
            yield served
        finally:
            await runner.cleanup()
            await engine.stop()
