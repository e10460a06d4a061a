"""The broker's composition root: builds every component, serves clients, shuts down in stages."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend import __version__
from backend.components.discovery import rpc as discovery_rpc
from backend.components.discovery.component import DiscoveryComponent
from backend.components.discovery.manual import ManualNodeStore
from backend.components.discovery.timing import DiscoveryTiming, mdns_enabled
from backend.components.engines import rpc as engines_rpc
from backend.components.engines.component import EnginesComponent
from backend.components.engines.ledger import EngineLedger
from backend.components.errors import rpc as errors_rpc
from backend.components.errors.registry import ErrorsRegistry
from backend.components.identity.identity import NodeIdentity, load_identity, report_identity
from backend.components.nodeinfo import rpc as nodeinfo_rpc
from backend.components.nodeinfo.payload import NodeInfoSource, last_engine_models
from backend.components.nodeinfo.server import NodeApiServer
from backend.components.nodeinfo.telemetry import TelemetryComponent
from backend.components.proxy.component import ProxyComponent, local_engines
from backend.components.proxy.table import (
    FIRST_CONTENT_TIMEOUT_ENV,
    HEADER_TIMEOUT_ENV,
    TableSource,
    merged_loads,
    timeout_from,
)
from backend.components.proxy.targets import DEFAULT_TIMEOUT_S
from backend.components.settings import rpc as settings_rpc
from backend.components.settings.service import CORRUPT_ERROR_ID, SettingsService
from backend.components.workloads import rpc as workloads_rpc
from backend.components.workloads.component import WorkloadsComponent
from backend.components.workloads.store import WorkloadStore
from backend.core import logs
from backend.core.clock import Clock, SystemClock
from backend.core.control_server import ControlServer
from backend.core.instance import BrokerRecord, InstanceLock
from backend.core.rpc import ClientHub, Dispatcher, NumberedStream
from backend.core.shutdown import Stage, run_stages
from backend.core.stdio import open_stdio_channel
from backend.core.store import Store
from backend.core.supervisor import Supervisor
from backend.core.worker import WorkerProcess
from backend.protocol import PROTOCOL_VERSION, errors, methods
from backend.protocol.endpoint import control_address
from backend.protocol.peer import RpcPeer
from backend.protocol.types import (
    AppReady,
    BrokerStatus,
    ComponentChanged,
    ComponentInfo,
    ComponentRef,
    ComponentsSnapshot,
    LogLevel,
    PingResult,
    Ports,
    SettingsSnapshot,
    VersionInfo,
)

log = logging.getLogger(__name__)

SHUTDOWN_BUDGET = 10.0
READY_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """What ``pair node`` was asked to run."""

    data_dir: Path
    ports: Ports
    stdio: bool = False
    log_level: LogLevel | None = None
    log_file: Path | None = None
    test_worker: str | None = None


class Broker:
    """One node's broker process. Owns the store, services, supervisor, and client connections."""

    def __init__(self, config: BrokerConfig, *, clock: Clock | None = None) -> None:
        self._config = config
        self._clock = clock or SystemClock()
        self._started_wall = self._clock.wall()
        self._started_mono = self._clock.monotonic()
        self._address = control_address(config.data_dir)
        self._lock = InstanceLock(config.data_dir)
        self._store = Store(config.data_dir / "pair.db")
        self._hub = ClientHub()
        self._dispatcher = Dispatcher()
        self._components = NumberedStream(methods.COMPONENTS_EVENT, self._hub)
        self._shutdown = asyncio.Event()
        self._ready = False
        self._run_id = 0
        self._workers: list[WorkerProcess] = []
        # Built in run(), once the store has told us who we are.
        self._node_id = ""
        self._identity: NodeIdentity | None = None
        self._errors: ErrorsRegistry | None = None
        self._settings: SettingsService | None = None
        self._supervisor: Supervisor | None = None
        self._engines: EnginesComponent | None = None
        self._proxy: ProxyComponent | None = None
        self._discovery: DiscoveryComponent | None = None
        self._workloads: WorkloadsComponent | None = None

    async def run(self, announce: Callable[[str], None] | None = None) -> int:
        """Serve until asked to stop; raises ``AlreadyRunning`` if the data dir is taken."""
        self._lock.acquire(
            BrokerRecord(os.getpid(), self._started_wall, self._address, __version__)
        )
        try:
            await self._store.open()
            try:
                return await self._serve(announce)
            finally:
                await self._store.close()
        finally:
            self._lock.release()

    async def _serve(self, announce: Callable[[str], None] | None) -> int:
        self._identity = await load_identity(self._store, self._config.data_dir, clock=self._clock)
        self._node_id = self._identity.node_id
        self._run_id = await self._store.execute(
            "INSERT INTO broker_runs (pid, version, started_at) VALUES (?, ?, ?)",
            (os.getpid(), __version__, self._started_wall),
        )
        errors_registry, settings, supervisor = self._build_services()
        self._register_methods(errors_registry, settings, supervisor)
        self._add_components(supervisor)
        self._install_signal_handlers()
        async with asyncio.TaskGroup() as group:
            if self._config.stdio:
                group.create_task(self._serve_stdio(), name="broker:stdio")
            supervisor.start()
            await self._become_ready(supervisor, announce)
            await self._shutdown.wait()
            await run_stages(self._shutdown_stages(supervisor), budget=SHUTDOWN_BUDGET)
        return 0

    def _build_services(self) -> tuple[ErrorsRegistry, SettingsService, Supervisor]:
        registry = ErrorsRegistry(
            node_id=self._node_id,
            clock=self._clock,
            on_update=lambda entries: self._hub.broadcast(methods.ERRORS_UPDATE, entries),
        )
        settings = SettingsService(
            self._config.data_dir / "settings.json",
            clock=self._clock,
            on_change=self._on_settings_changed,
            on_corrupt=lambda message: registry.raise_error(
                CORRUPT_ERROR_ID, message, severity="warning"
            ),
        )
        settings.load()
        if self._config.log_level is None:
            logs.set_level(self._log_level(settings))
        if self._store.set_aside_path is not None:
            registry.raise_error(
                "store:corrupt",
                f"The database could not be read; it was kept as {self._store.set_aside_path.name}"
                " and a new one was started.",
                severity="warning",
            )
        if self._identity is not None:
            report_identity(registry, self._identity)
        supervisor = Supervisor(errors=registry, clock=self._clock, on_change=self._on_component)
        self._errors, self._settings, self._supervisor = registry, settings, supervisor
        return registry, settings, supervisor

    def _add_components(self, supervisor: Supervisor) -> None:
        supervisor.add(
            ControlServer(
                self._address,
                dispatcher=self._dispatcher,
                hub=self._hub,
                on_connect=self._greet,
            )
        )
        assert self._errors is not None
        self._engines = EnginesComponent(
            data_dir=self._config.data_dir,
            ledger=EngineLedger(self._store, self._clock),
            errors_sink=self._errors,
            clock=self._clock,
            push=self._hub.broadcast,
        )
        supervisor.add(self._engines)
        engines_rpc.register(self._dispatcher, self._engines)
        self._add_proxy(supervisor, self._engines)
        self._add_node_components(supervisor)
        if self._config.test_worker:
            worker = WorkerProcess(
                "testworker",
                [sys.executable, "-m", "backend.workers.testworker", self._config.test_worker],
                clock=self._clock,
                environment=self._worker_environment,
            )
            self._workers.append(worker)
            supervisor.add(worker)

    def _add_proxy(self, supervisor: Supervisor, engines: EnginesComponent) -> None:
        assert self._errors is not None
        events = NumberedStream(methods.WORKLOADS_EVENT, self._hub)
        workloads = WorkloadsComponent(
            store=WorkloadStore(self._store),
            clock=self._clock,
            node_id=self._node_id,
            events=events,
        )
        # Added before the proxy: components stop in reverse, so the proxy's last job reports
        # are written when the workloads component stops after it.
        supervisor.add(workloads)
        self._workloads = workloads
        workloads_rpc.register(self._dispatcher, workloads, events)
        table = TableSource(
            node_id=lambda: self._node_id,
            local=lambda: local_engines(engines),
            nodes=lambda: self._discovery.nodes() if self._discovery is not None else [],
            loads=lambda: merged_loads(
                workloads.pending_by_node(),
                self._discovery.nodes() if self._discovery is not None else [],
            ),
            timeouts=self._proxy_timeouts,
            pinned=lambda: str(self._settings.get("proxy_pinned_node")) if self._settings else "",
        )
        self._proxy = ProxyComponent(
            ports=self._config.ports,
            errors=self._errors,
            clock=self._clock,
            targets=table,
            environment=self._worker_environment,
            on_job=workloads.on_job_event,
            on_worker_exit=lambda: workloads.fail_unfinished(PROXY_GONE),
        )
        supervisor.add(self._proxy)

    def _proxy_timeouts(self) -> tuple[float, float]:
        def setting(key: str) -> float:
            value = self._settings.get(key) if self._settings is not None else DEFAULT_TIMEOUT_S
            return float(value)

        return (
            timeout_from(setting("proxy_header_timeout_s"), os.environ, HEADER_TIMEOUT_ENV),
            timeout_from(
                setting("proxy_first_content_timeout_s"), os.environ, FIRST_CONTENT_TIMEOUT_ENV
            ),
        )

    def _add_node_components(self, supervisor: Supervisor) -> None:
        telemetry = TelemetryComponent(clock=self._clock)
        source = NodeInfoSource(
            node_id=self._node_id,
            version=__version__,
            ports=self._published_ports,
            name=self._node_name,
            telemetry=telemetry.view,
            engine_models=lambda: last_engine_models(self._engines),
            pending_jobs=self._pending_here,
        )
        supervisor.add(telemetry)
        supervisor.add(NodeApiServer(port=self._config.ports.node, source=source))
        nodeinfo_rpc.register(self._dispatcher, source)
        self._add_discovery(supervisor)

    def _add_discovery(self, supervisor: Supervisor) -> None:
        assert self._errors is not None
        events = NumberedStream(methods.DISCOVERY_EVENT, self._hub)
        discovery = DiscoveryComponent(
            node_id=self._node_id,
            ports=self._config.ports,
            name=self._node_name,
            clock=self._clock,
            events=events,
            errors_sink=self._errors,
            manual_store=ManualNodeStore(self._store),
            timing=DiscoveryTiming.from_environment(os.environ),
            use_mdns=mdns_enabled(os.environ),
        )
        supervisor.add(discovery)
        self._discovery = discovery
        discovery_rpc.register(self._dispatcher, discovery, events)

    def _register_methods(
        self, registry: ErrorsRegistry, settings: SettingsService, supervisor: Supervisor
    ) -> None:
        add = self._dispatcher.add_plain
        add(methods.PING, self._ping)
        add(methods.VERSION, self._version)
        add(methods.STATUS, self._status)
        add(methods.SHUTDOWN, self._request_shutdown)
        add(methods.COMPONENTS_SUBSCRIBE, self._subscribe_components)
        add(methods.COMPONENTS_UNSUBSCRIBE, self._unsubscribe_components)
        self._dispatcher.add(methods.COMPONENTS_RESTART, self._restart_component, ComponentRef)
        errors_rpc.register(self._dispatcher, registry)
        settings_rpc.register(self._dispatcher, settings)

    async def _become_ready(
        self, supervisor: Supervisor, announce: Callable[[str], None] | None
    ) -> None:
        await supervisor.wait_started(READY_TIMEOUT)
        self._ready = True
        self._hub.broadcast(methods.APP_READY, self._ready_payload())
        log.info("broker ready (pid %d, control socket %s)", os.getpid(), self._address)
        if announce is not None:
            announce(self._describe_endpoints())

    async def _serve_stdio(self) -> None:
        reader, writer = await open_stdio_channel()
        peer = RpcPeer(reader, writer, name="stdio", on_request=self._dispatcher)
        self._hub.add(peer)
        try:
            self._greet(peer)
            await peer.run()
        finally:
            self._hub.remove(peer)
            if not self._shutdown.is_set():
                log.info("stdin closed: shutting down")
                self._shutdown.set()

    def _shutdown_stages(self, supervisor: Supervisor) -> list[Stage]:
        # Later stages close the front doors first and stop owned engines before components.
        engines = self._engines
        return [
            Stage("front doors", 1.0, self._proxy.close_front_doors if self._proxy else _nothing),
            Stage("engines", 5.0, engines.prepare_shutdown if engines else _nothing),
            Stage("components", 4.0, lambda: supervisor.stop(grace=2.0)),
            Stage("clients", 1.0, lambda: self._hub.close_all(timeout=1.0)),
            Stage("store", 2.0, self._record_clean_stop),
        ]

    async def _record_clean_stop(self) -> None:
        await self._store.execute(
            "UPDATE broker_runs SET stopped_at = ? WHERE id = ?", (self._clock.wall(), self._run_id)
        )

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self._on_signal, signum)

    def _on_signal(self, signum: int) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        self._shutdown.set()

    def _greet(self, peer: RpcPeer) -> None:
        if self._ready:
            peer.notify(methods.APP_READY, self._ready_payload())

    def _on_component(self, info: ComponentInfo) -> None:
        self._components.publish(lambda seq: ComponentChanged(seq=seq, component=info))

    def _on_settings_changed(self, snapshot: SettingsSnapshot) -> None:
        level = snapshot.values.get("log_level")
        if isinstance(level, str) and self._settings is not None:
            resolved = self._log_level(self._settings)
            logs.set_level(resolved)
            for worker in self._workers:
                worker.notify(methods.LOG_SET_LEVEL, {"level": resolved})
        self._hub.broadcast(methods.SETTINGS_CHANGED, snapshot)

    def _worker_environment(self) -> dict[str, str]:
        level = self._config.log_level
        if level is None and self._settings is not None:
            level = self._log_level(self._settings)
        return {"PAIR_LOG_LEVEL": level or "info"}

    @staticmethod
    def _log_level(settings: SettingsService) -> LogLevel:
        value = settings.get("log_level")
        for level in ("debug", "info", "warning", "error"):
            if value == level:
                return level
        return "info"

    # RPC handlers -----------------------------------------------------------------------------

    async def _ping(self, _: RpcPeer) -> PingResult:
        return PingResult(pong=True, version=__version__, uptime_ms=self._uptime_ms())

    async def _version(self, _: RpcPeer) -> VersionInfo:
        return VersionInfo(
            version=__version__,
            protocol=PROTOCOL_VERSION,
            python=platform.python_version(),
            platform=platform.platform(),
        )

    async def _status(self, _: RpcPeer) -> BrokerStatus:
        assert self._supervisor is not None and self._errors is not None
        return BrokerStatus(
            version=__version__,
            pid=os.getpid(),
            started_at=self._started_wall,
            uptime_ms=self._uptime_ms(),
            data_dir=str(self._config.data_dir),
            node_id=self._node_id,
            node_name=self._node_name(),
            control_address=self._address,
            log_file=str(self._config.log_file) if self._config.log_file else None,
            ports=self._published_ports(),
            components=self._supervisor.snapshot(),
            errors=self._errors.snapshot(),
            front_doors={str(d): u for d, u in self._proxy.endpoints().items()}
            if self._proxy
            else {},
        )

    async def _request_shutdown(self, _: RpcPeer) -> dict[str, bool]:
        log.info("shutdown requested over RPC")
        self._shutdown.set()
        return {"ok": True}

    async def _subscribe_components(self, peer: RpcPeer) -> ComponentsSnapshot:
        assert self._supervisor is not None
        seq = self._components.subscribe(peer)
        return ComponentsSnapshot(seq=seq, components=self._supervisor.snapshot())

    async def _unsubscribe_components(self, peer: RpcPeer) -> dict[str, bool]:
        self._components.unsubscribe(peer)
        return {"subscribed": False}

    async def _restart_component(self, params: ComponentRef, _: RpcPeer) -> ComponentInfo:
        assert self._supervisor is not None
        if self._supervisor.stopping:
            raise errors.ShuttingDown("the broker is shutting down")
        try:
            return self._supervisor.restart(params.name)
        except KeyError:
            raise errors.NotFound(f"no component named {params.name!r}") from None

    # Helpers ---------------------------------------------------------------------------------

    def _uptime_ms(self) -> int:
        return int((self._clock.monotonic() - self._started_mono) * 1000)

    def _node_name(self) -> str:
        configured = self._settings.get("node_name") if self._settings is not None else ""
        return str(configured) if configured else socket.gethostname()

    def _ready_payload(self) -> AppReady:
        return AppReady(version=__version__, node_name=self._node_name(), pid=os.getpid())

    def _pending_here(self) -> int | None:
        if self._workloads is None:
            return None
        return self._workloads.pending_by_node().get(self._node_id, 0)

    def _published_ports(self) -> Ports:
        """The ports peers should use: the front doors' real ones once they are open."""
        ports = self._config.ports
        doors = self._proxy.ports() if self._proxy is not None else {}
        return Ports(
            node=ports.node,
            ollama=doors.get("ollama", ports.ollama),
            openai=doors.get("openai", ports.openai),
            llamacpp=doors.get("llamacpp", ports.llamacpp),
        )

    def _front_doors(self) -> str:
        doors = self._proxy.endpoints() if self._proxy is not None else {}
        if not doors:
            return "not open yet (`pair status` shows them)"
        return ", ".join(f"{door} {url}" for door, url in sorted(doors.items()))

    def _describe_endpoints(self) -> str:
        ports = self._config.ports
        lines = [
            f"PAIR node {__version__} is running (pid {os.getpid()}, node {self._node_name()})",
            f"  data dir        {self._config.data_dir}",
            f"  control socket  {self._address}   (pair status --data-dir ... attaches here)",
            f"  log file        {self._config.log_file or 'stderr only'}",
            f"  node API        http://0.0.0.0:{ports.node}/v1/node-info",
            f"  front doors     {self._front_doors()}",
            "  engines         `pair engines`, `pair engine start NAME`",
            "Stop with Ctrl+C or `pair stop`.",
        ]
        return "\n".join(lines)


PROXY_GONE = "interrupted: the proxy worker stopped"


async def _nothing() -> None:
    return None
