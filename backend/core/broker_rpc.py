"""The broker's own JSON-RPC methods (ping, version, status, shutdown, the components list) and
the ``app:ready`` push."""

from __future__ import annotations

import logging
import os
import platform
from collections.abc import Callable, Mapping
from pathlib import Path

import msgspec

from backend import __version__
from backend.core.clock import Clock
from backend.core.rpc import ClientHub, Dispatcher, NumberedStream
from backend.core.supervisor import Supervisor
from backend.protocol import PROTOCOL_VERSION, errors, methods
from backend.protocol.contract import NoParams
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import (
    AppReady,
    BrokerStatus,
    ComponentChanged,
    ComponentInfo,
    ComponentRef,
    ComponentsEvent,
    ComponentsSnapshot,
    PingResult,
    Ports,
    ServiceError,
    VersionInfo,
)
from backend.protocol.types.replicas import ReplicasStatus
from backend.protocol.types.results import Ok, Unsubscribed

log = logging.getLogger(__name__)


class Uptime(msgspec.Struct, frozen=True):
    """Milliseconds since ``since`` on the clock's monotonic time."""

    clock: Clock
    since: float

    def __call__(self) -> int:
        return int((self.clock.monotonic() - self.since) * 1000)


class StatusSource(msgspec.Struct, frozen=True):
    """Builds the ``status`` answer: the run's fixed facts and its live parts, read on demand."""

    started_at: float
    data_dir: Path
    node_id: NodeId
    control_address: str
    log_file: Path | None
    uptime_ms: Callable[[], int]
    node_name: Callable[[], str]
    ports: Callable[[], Ports]
    front_doors: Callable[[], Mapping[str, str]]
    components: Callable[[], list[ComponentInfo]]
    errors: Callable[[], list[ServiceError]]
    fingerprint: str | None = None
    cluster_id: Callable[[], str | None] = lambda: None
    placement: Callable[[], str | None] = lambda: None
    replicas: Callable[[], ReplicasStatus | None] = lambda: None
    # Looked up once, when the broker is set up, so no ``version`` call waits for git.
    commit: str | None = None

    def describe(self) -> BrokerStatus:
        """The status as of now."""
        return BrokerStatus(
            version=__version__,
            pid=os.getpid(),
            started_at=self.started_at,
            uptime_ms=self.uptime_ms(),
            data_dir=str(self.data_dir),
            node_id=self.node_id,
            node_name=self.node_name(),
            control_address=self.control_address,
            log_file=str(self.log_file) if self.log_file else None,
            ports=self.ports(),
            components=self.components(),
            errors=self.errors(),
            front_doors=dict(self.front_doors()),
            fingerprint=self.fingerprint,
            cluster_id=self.cluster_id(),
            placement=self.placement(),
            replicas=self.replicas(),
        )


class Readiness:
    """Whether the broker's components have started; ``app:ready`` says so to every client then,
    and to each client that connects later."""

    def __init__(self, hub: ClientHub, node_name: Callable[[], str]) -> None:
        self._hub = hub
        self._node_name = node_name
        self.ready = False

    def mark_ready(self) -> None:
        """The components are started: tell every client."""
        self.ready = True
        self._hub.broadcast(methods.APP_READY, self._payload())

    def greet(self, peer: RpcPeer) -> None:
        """A client connected: tell it when the broker is ready already."""
        if self.ready:
            peer.notify(methods.APP_READY.name, self._payload())

    def _payload(self) -> AppReady:
        return AppReady(version=__version__, node_name=self._node_name(), pid=os.getpid())


def component_publisher(stream: NumberedStream[ComponentsEvent]) -> Callable[[ComponentInfo], None]:
    """The supervisor's ``on_change``: each component's new state, as a numbered event."""

    def publish(info: ComponentInfo) -> None:
        stream.publish(lambda seq: ComponentChanged(seq=seq, component=info))

    return publish


def register(
    dispatcher: Dispatcher, *, status: StatusSource, request_shutdown: Callable[[], None]
) -> None:
    """Route ``ping``, ``version``, ``status`` and ``shutdown``."""

    async def ping(_: NoParams, __: RpcPeer) -> PingResult:
        return PingResult(pong=True, version=__version__, uptime_ms=status.uptime_ms())

    async def version(_: NoParams, __: RpcPeer) -> VersionInfo:
        return VersionInfo(
            version=__version__,
            protocol=PROTOCOL_VERSION,
            python=platform.python_version(),
            platform=platform.platform(),
            commit=status.commit,
        )

    async def describe(_: NoParams, __: RpcPeer) -> BrokerStatus:
        return status.describe()

    async def shutdown(_: NoParams, __: RpcPeer) -> Ok:
        log.info("shutdown requested over RPC")
        request_shutdown()
        return Ok()

    dispatcher.add(methods.PING, ping)
    dispatcher.add(methods.VERSION, version)
    dispatcher.add(methods.STATUS, describe)
    dispatcher.add(methods.SHUTDOWN, shutdown)


def register_components(
    dispatcher: Dispatcher, supervisor: Supervisor, stream: NumberedStream[ComponentsEvent]
) -> None:
    """Route ``components:subscribe``, ``components:unsubscribe`` and ``components:restart``."""

    async def subscribe(_: NoParams, peer: RpcPeer) -> ComponentsSnapshot:
        seq = stream.subscribe(peer)
        return ComponentsSnapshot(seq=seq, components=supervisor.snapshot())

    async def unsubscribe(_: NoParams, peer: RpcPeer) -> Unsubscribed:
        stream.unsubscribe(peer)
        return Unsubscribed()

    async def restart(params: ComponentRef, _: RpcPeer) -> ComponentInfo:
        if supervisor.stopping:
            raise errors.ShuttingDown("the broker is shutting down")
        try:
            return supervisor.restart(params.name)
        except KeyError:
            raise errors.NotFound(f"no component named {params.name!r}") from None

    dispatcher.add(methods.COMPONENTS_SUBSCRIBE, subscribe)
    dispatcher.add(methods.COMPONENTS_UNSUBSCRIBE, unsubscribe)
    dispatcher.add(methods.COMPONENTS_RESTART, restart)
