"""What the broker's composition root (``backend/wiring.py``) builds on and hands around: the
run's config, the foundation opened before the node is built, the first layer of services, and
the built node."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from backend.components.cluster.members import Members
from backend.components.engines.component import EnginesComponent
from backend.components.errors.registry import ErrorsRegistry
from backend.components.identity.certificate import StoredIdentity
from backend.components.identity.identity import NodeIdentity
from backend.components.proxy.component import ProxyComponent
from backend.components.settings.log_level import LogLevels
from backend.components.settings.service import SettingsService
from backend.components.split.lender import RpcServerLender
from backend.core.broker_rpc import Readiness, Uptime
from backend.core.clock import Clock
from backend.core.rpc import ClientHub, Dispatcher
from backend.core.store import Store
from backend.core.supervisor import Supervisor
from backend.protocol.types.broker import LogLevel, Ports


class BrokerConfig(msgspec.Struct, frozen=True):
    """What ``pair node`` was asked to run."""

    data_dir: Path
    ports: Ports
    stdio: bool = False
    log_level: LogLevel | None = None
    log_file: Path | None = None


class WorkerSpec(msgspec.Struct, frozen=True):
    """An extra worker process for the broker to supervise; its caller names it (tests do)."""

    name: str
    argv: tuple[str, ...]


class Foundation(msgspec.Struct, frozen=True):
    """What the broker holds before the node is built: its config, the open store and the
    identity read from it, the clock, and how to ask the broker to stop."""

    config: BrokerConfig
    extra_workers: Sequence[WorkerSpec]
    store: Store
    identity: NodeIdentity
    credentials: StoredIdentity
    members: Members
    clock: Clock
    started_at: float
    uptime_ms: Uptime
    control_address: str
    request_shutdown: Callable[[], None]


class Node(msgspec.Struct, frozen=True):
    """The built node: what the broker starts, serves with and stops in stages."""

    hub: ClientHub
    dispatcher: Dispatcher
    supervisor: Supervisor
    readiness: Readiness
    engines: EnginesComponent
    proxy: ProxyComponent
    node_name: Callable[[], str]
    rpc_server: RpcServerLender


class Services(msgspec.Struct, frozen=True):
    """The first layer: what every component may be handed."""

    hub: ClientHub
    dispatcher: Dispatcher
    errors: ErrorsRegistry
    settings: SettingsService
    levels: LogLevels
    supervisor: Supervisor
    node_name: Callable[[], str]
    readiness: Readiness


def published_ports(configured: Ports, proxy: ProxyComponent) -> Ports:
    """The ports peers should use: the front doors' and the relay's real ones once open."""
    doors = proxy.ports()
    relay = proxy.relay_port()
    return Ports(
        node=configured.node,
        ollama=doors.get("ollama", configured.ollama),
        openai=doors.get("openai", configured.openai),
        llamacpp=doors.get("llamacpp", configured.llamacpp),
        relay=relay if relay is not None else configured.relay,
    )
