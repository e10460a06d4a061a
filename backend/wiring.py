"""The broker's object graph, built in dependency order.

Each piece is constructed after everything it reads, so nothing starts empty to be filled in
later: the services (errors, settings, log levels, supervisor) first, then the engines, the jobs
ledger, discovery, the cluster, the proxy (its routing table reads all four: only trusted
members are peers), the federation (the member links: calls aimed at other members, mirrors of
their engines, errors and jobs) and the node API (it publishes the proxy's real ports and serves
the member link). Every component's JSON-RPC methods are routed as it is built. What it builds
on and hands around is in ``wiring_base.py``; the cluster-facing pieces are built by
``wiring_members.py``; ``build_node`` here is the one place that puts them together.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from functools import partial

from backend import wiring_members
from backend.common import buildinfo
from backend.components.aliases import rpc as aliases_rpc
from backend.components.aliases.service import AliasesService
from backend.components.aliases.store import AliasStore
from backend.components.apikeys import rpc as apikeys_rpc
from backend.components.apikeys.service import ApiKeysService
from backend.components.apikeys.store import ApiKeyStore
from backend.components.cluster.service import ClusterService
from backend.components.discovery import rpc as discovery_rpc
from backend.components.discovery.component import DiscoveryComponent
from backend.components.discovery.manual import ManualNodeStore
from backend.components.discovery.timing import DiscoveryTiming, mdns_enabled
from backend.components.engines import replica_actions, scheduler_view
from backend.components.engines import rpc as engines_rpc
from backend.components.engines.component import EnginesComponent
from backend.components.engines.ledger import EngineLedger
from backend.components.engines.scheduler_view import SchedulerView
from backend.components.errors import rpc as errors_rpc
from backend.components.errors.registry import ErrorsRegistry
from backend.components.federation.component import FederationComponent, MemberEnginesBoard
from backend.components.hub import rpc as hub_rpc
from backend.components.hub.client import HubClient, hub_url
from backend.components.identity.identity import report_identity
from backend.components.jobs import rpc as jobs_rpc
from backend.components.jobs.component import JobsComponent
from backend.components.jobs.journal import JournalFolders
from backend.components.jobs.store import JobRecordStore
from backend.components.proxy.away import local_away
from backend.components.proxy.component import ProxyComponent, local_engines
from backend.components.proxy.table import (
    FIRST_CONTENT_TIMEOUT_ENV,
    HEADER_TIMEOUT_ENV,
    RELAY_IDLE_TIMEOUT_ENV,
    LanAccess,
    TableSource,
    merged_loads,
    timeout_from,
)
from backend.components.proxy.targets import DOOR_PORT_SETTINGS, door_ports
from backend.components.replicas import rpc as replicas_rpc
from backend.components.replicas.component import ReplicasComponent
from backend.components.replicas.status import ttl_from_environment
from backend.components.settings import rpc as settings_rpc
from backend.components.settings.log_level import LogLevels
from backend.components.settings.service import CORRUPT_ERROR_ID, SettingsService
from backend.components.settings.view import SettingsView
from backend.core import broker_rpc, logs
from backend.core.broker_rpc import Readiness, StatusSource
from backend.core.clock import supervision_clock
from backend.core.component import Component
from backend.core.control_server import ControlServer
from backend.core.rpc import ClientHub, Dispatcher, NumberedStream
from backend.core.supervisor import Supervisor
from backend.core.worker import WorkerProcess
from backend.protocol import methods
from backend.protocol.proxy import RELAY_IDLE_S
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import LogLevel, LogLevelParams
from backend.wiring_base import (
    BrokerConfig,
    Foundation,
    Node,
    Services,
    WorkerSpec,
    published_ports,
)

__all__ = ["BrokerConfig", "Foundation", "Node", "WorkerSpec", "build_node", "published_ports"]

PROXY_GONE = "interrupted: the proxy worker stopped"


def build_node(base: Foundation) -> Node:
    """Every component, built in dependency order, routed, and added in start order."""
    services = _services(base)
    workers = [_worker(base, spec, services.levels) for spec in base.extra_workers]
    _register_settings(services, workers)
    control = ControlServer(
        base.control_address,
        dispatcher=services.dispatcher,
        hub=services.hub,
        on_connect=services.readiness.greet,
    )
    board = MemberEnginesBoard(NumberedStream(methods.ENGINE_EVENT, services.hub))
    schedulers = SchedulerView(board.events)
    engines = _engines(base, services, board, schedulers)
    jobs = _jobs(base, services)
    discovery = _discovery(base, services)
    cluster = wiring_members.cluster(base, services, board)
    apikeys = _apikeys(base, services)
    aliases = AliasesService(AliasStore(base.store), clock=base.clock)
    aliases_rpc.register(services.dispatcher, aliases)
    hub_rpc.register(services.dispatcher, HubClient(hub_url(os.environ)))
    proxy = _proxy(
        base,
        services,
        engines,
        jobs,
        discovery,
        cluster.service,
        apikeys,
        aliases,
        schedulers,
        board,
    )
    # Exclusive operations on an engine wait for its scheduler in the proxy worker to drain it.
    engines.bind_gate(proxy.gate)
    federation, member_rpc = wiring_members.federation(
        base, services, cluster.service, discovery, jobs, board
    )
    rpc_server = wiring_members.rpc_server(base, engines)
    telemetry, node_api = wiring_members.node_api(
        base, services, engines, jobs, proxy, cluster.service, member_rpc, rpc_server
    )
    discovery.bind_self(node_api.describe)
    spread = wiring_members.spread(base, services, cluster.service, board, discovery, telemetry)
    engines.bind_shaper("llamacpp", spread.host)
    spread.host.bind_replan(lambda: engines.controller("llamacpp").restart(kill=True))
    replicas = _replicas(base, services, engines, jobs, discovery, federation, cluster.service)
    proxy.bind_demand(replicas.on_demand)
    _register_broker(base, services, proxy, replicas)
    # Start order; stop is the reverse. Jobs before the proxy, so the proxy's last job
    # reports are written; discovery after the node API, so the node is announced once it serves.
    started: list[Component] = [
        control,
        spread,  # stops after the engines: their llama-server uses its tunnels to the end
        engines,
        jobs,
        proxy,
        cluster,
        telemetry,
        node_api,
        discovery,
        federation,
        replicas,  # stops first: no load or unload is left half done by the engines stopping
    ]
    for component in (*started, *workers):
        services.supervisor.add(component)
    return Node(
        hub=services.hub,
        dispatcher=services.dispatcher,
        supervisor=services.supervisor,
        readiness=services.readiness,
        engines=engines,
        proxy=proxy,
        node_name=services.node_name,
        rpc_server=rpc_server,
    )


def _services(base: Foundation) -> Services:
    hub = ClientHub()
    registry = ErrorsRegistry(
        node_id=base.identity.node_id,
        clock=base.clock,
        on_update=lambda entries: hub.broadcast(methods.ERRORS_UPDATE, list(entries)),
    )
    settings = _settings(base, hub, registry)
    _report_start_problems(base, registry)
    levels = LogLevels(command_line=base.config.log_level, saved=settings.view().log_level)
    logs.set_level(levels.current)
    components = NumberedStream(methods.COMPONENTS_EVENT, hub)
    supervisor = Supervisor(
        errors=registry,
        clock=supervision_clock(base.clock, os.environ),
        on_change=broker_rpc.component_publisher(components),
    )
    dispatcher = Dispatcher()
    broker_rpc.register_components(dispatcher, supervisor, components)
    errors_rpc.register(dispatcher, registry)
    name = _node_name(settings)
    readiness = Readiness(hub, name)
    return Services(hub, dispatcher, registry, settings, levels, supervisor, name, readiness)


def _settings(base: Foundation, hub: ClientHub, registry: ErrorsRegistry) -> SettingsService:
    settings = SettingsService(
        base.config.data_dir / "settings.json",
        clock=base.clock,
        on_change=lambda snapshot: hub.broadcast(methods.SETTINGS_CHANGED, snapshot),
        on_corrupt=lambda message: registry.raise_error(
            CORRUPT_ERROR_ID, message, severity="warning"
        ),
    )
    settings.load()
    return settings


def _report_start_problems(base: Foundation, registry: ErrorsRegistry) -> None:
    set_aside = base.store.set_aside_path
    if set_aside is not None:
        registry.raise_error(
            "store:corrupt",
            f"The database could not be read; it was kept as {set_aside.name}"
            " and a new one was started.",
            severity="warning",
        )
    report_identity(registry, base.identity)


def _lan_access(view: SettingsView, apikeys: ApiKeysService) -> LanAccess:
    """Who besides this computer's own programs may use the front doors, from the settings."""
    return LanAccess(view.lan_access, apikeys.hashes(), view.allowed_origins, apikeys.door_keys())


def _node_name(settings: SettingsService) -> Callable[[], str]:
    def name() -> str:
        return settings.view().node_name or socket.gethostname()

    return name


def _worker(base: Foundation, spec: WorkerSpec, levels: LogLevels) -> WorkerProcess:
    # The caller's extra workers (the test worker) are watched on supervision's clock, so a
    # test's faster clock shortens their heartbeat timeout with the restart schedule.
    clock = supervision_clock(base.clock, os.environ)
    return WorkerProcess(spec.name, spec.argv, clock=clock, environment=levels.worker_environment)


def _register_settings(services: Services, workers: Sequence[WorkerProcess]) -> None:
    def apply_level(level: LogLevel) -> None:
        logs.set_level(level)
        for worker in workers:
            worker.notify(methods.LOG_SET_LEVEL.name, LogLevelParams(level=level))

    settings_rpc.register(
        services.dispatcher, services.settings, levels=services.levels, apply_level=apply_level
    )


def _engines(
    base: Foundation, services: Services, board: MemberEnginesBoard, schedulers: SchedulerView
) -> EnginesComponent:
    from backend.components.engines.launch import SettingsValues

    settings = services.settings
    engines = EnginesComponent(
        data_dir=base.config.data_dir,
        ledger=EngineLedger(base.store, base.clock),
        errors_sink=services.errors,
        clock=base.clock,
        events=board.events,
        members=board.members,
        scheduler=schedulers.states,
        # llamacpp_parallel, llamacpp_context and llamacpp_model, read at every launch.
        settings=SettingsValues(lambda: settings.snapshot().values, settings.update),
    )
    engines_rpc.register(services.dispatcher, engines, board.events)
    return engines


def _jobs(base: Foundation, services: Services) -> JobsComponent:
    events = NumberedStream(methods.JOBS_EVENT, services.hub)
    jobs = JobsComponent(
        store=JobRecordStore(base.store),
        clock=base.clock,
        node_id=base.identity.node_id,
        events=events,
        # The proxy workers' journal of job ends: a broker killed before it stored one keeps it.
        journal=JournalFolders.for_new_run(base.config.data_dir / "jobs-journal"),
    )
    jobs_rpc.register(services.dispatcher, jobs, events)
    return jobs


def _discovery(base: Foundation, services: Services) -> DiscoveryComponent:
    events = NumberedStream(methods.DISCOVERY_EVENT, services.hub)
    discovery = DiscoveryComponent(
        node_id=base.identity.node_id,
        ports=base.config.ports,
        name=services.node_name,
        clock=base.clock,
        events=events,
        errors_sink=services.errors,
        manual_store=ManualNodeStore(base.store),
        timing=DiscoveryTiming.from_environment(os.environ),
        use_mdns=mdns_enabled(os.environ),
        announce=lambda: services.settings.view().announces,  # followed live: below
        # Read on every poll, so mutual TLS follows the membership at once.
        members=lambda: base.members.current.trusted(),
        removed=lambda: base.members.current.removed_node_ids(),
        credentials=base.credentials.credentials,
    )
    services.settings.add_listener(discovery.settings_changed)
    discovery_rpc.register(services.dispatcher, discovery, events)
    return discovery


# The calls that change a source of the proxy's routing table; each answers once the proxy
# worker routes by the changed table (``ProxyComponent.settled``).
TABLE_CHANGES = (
    methods.SETTINGS_SET,
    methods.APIKEYS_CREATE,
    methods.APIKEYS_REVOKE,
    methods.MODELS_ALIAS_SET,
    methods.MODELS_ALIAS_REMOVE,
)


def _proxy(
    base: Foundation,
    services: Services,
    engines: EnginesComponent,
    jobs: JobsComponent,
    discovery: DiscoveryComponent,
    cluster: ClusterService,
    apikeys: ApiKeysService,
    aliases: AliasesService,
    schedulers: SchedulerView,
    board: MemberEnginesBoard,
) -> ProxyComponent:
    """The front doors' worker; its schedulers' states go to ``schedulers`` (and from there
    to ``engine:scheduler`` and the engine stream). Members are routed to only while the
    ``board`` says their link is up."""
    settings = services.settings
    node_id = base.identity.node_id
    table = TableSource(
        node_id=lambda: node_id,
        local=lambda: local_engines(engines),
        nodes=discovery.nodes,
        loads=lambda: merged_loads(jobs.pending_by_node(), discovery.nodes()),
        timeouts=_proxy_timeouts(settings),
        pinned=lambda: settings.view().proxy_pinned_node or "",
        members=lambda: cluster.membership,
        lan=lambda: _lan_access(settings.view(), apikeys),
        placement=lambda: settings.view().placement_policy,
        local_away=lambda: local_away(engines.returning_models(), node_id, services.node_name()),
        linked=board.linked,
        relay_idle=lambda: timeout_from(RELAY_IDLE_S, os.environ, RELAY_IDLE_TIMEOUT_ENV),
        aliases=aliases.aliases,
    )
    proxy = ProxyComponent(
        ports=base.config.ports,
        errors=services.errors,
        clock=base.clock,
        targets=table,
        credentials=base.credentials.credentials,
        environment=services.levels.worker_environment,
        on_job=jobs.on_job_event,
        on_keys_used=apikeys.keys_used,
        jobs_stored=jobs.wait_stored,
        jobs_journal=jobs.journal_dir,
        on_worker_exit=lambda kept: jobs.fail_unfinished(PROXY_GONE, keep=kept),
        job_progress=jobs.progress,
        on_scheduler=schedulers.changed,  # also the empty state once the worker is gone
        load_model=engines.switch_model,
        door_ports=lambda: door_ports(settings.snapshot().values),
    )
    # The table's sources say when they change, so a table at rest is looked at once then.
    for source in (settings, apikeys, aliases):
        source.add_listener(proxy.look_now)
    # This node's engines and the members' links. Discovery's changes are not signalled: it
    # polls every 2 s itself, and its telemetry would wake the loop at each sample.
    board.events.on_publish(proxy.look_now)
    # The members' certificates (the relay's pins): a removed member is refused at once.
    cluster.on_trust_changed(lambda _: proxy.look_now())
    # A client told its change was made can use it at once: a new alias resolves, a revoked
    # key is refused, by the next request it sends.
    services.dispatcher.settle_after(TABLE_CHANGES, proxy.settled)
    # A changed door port moves the door before the setting is saved; a taken port refuses it.
    settings.add_applier(
        frozenset(DOOR_PORT_SETTINGS), lambda changed: proxy.move_doors(door_ports(changed))
    )
    scheduler_view.register(services.dispatcher, schedulers, fetch=proxy.fetch_scheduler)
    return proxy


def _proxy_timeouts(settings: SettingsService) -> Callable[[], tuple[float, float]]:
    def timeouts() -> tuple[float, float]:
        view = settings.view()
        return (
            timeout_from(view.proxy_header_timeout_s, os.environ, HEADER_TIMEOUT_ENV),
            timeout_from(view.proxy_first_content_timeout_s, os.environ, FIRST_CONTENT_TIMEOUT_ENV),
        )

    return timeouts


def _apikeys(base: Foundation, services: Services) -> ApiKeysService:
    apikeys = ApiKeysService(ApiKeyStore(base.store), clock=base.clock)
    apikeys_rpc.register(services.dispatcher, apikeys)
    return apikeys


def _replicas(
    base: Foundation,
    services: Services,
    engines: EnginesComponent,
    jobs: JobsComponent,
    discovery: DiscoveryComponent,
    federation: FederationComponent,
    cluster: ClusterService,
) -> ReplicasComponent:
    """The replica planner: more members for a hot model, unloaded again when idle."""
    node_id = base.identity.node_id
    replicas = ReplicasComponent(
        node_id=node_id,
        node_name=services.node_name,
        clock=base.clock,
        settings=ttl_from_environment(services.settings.view, os.environ),
        members=lambda: [member.node_id for member in base.members.current.trusted()],
        nodes=discovery.nodes,
        engine_models=engines.last_listing,
        local_action=replica_actions.local_action(engines, NodeId(node_id)),
        member_action=partial(federation.forward, methods.ENGINE_ACTION),
        record_jobs=jobs.record_external,
    )
    replicas_rpc.register(services.dispatcher, replicas, methods.REPLICAS_STATUS)
    # What makes it active or not: the replicas_* settings and the trusted members.
    services.settings.add_listener(replicas.inputs_changed)
    cluster.on_trust_changed(lambda _: replicas.inputs_changed())
    return replicas


def _register_broker(
    base: Foundation, services: Services, proxy: ProxyComponent, replicas: ReplicasComponent
) -> None:
    status = StatusSource(
        started_at=base.started_at,
        data_dir=base.config.data_dir,
        node_id=base.identity.node_id,
        control_address=base.control_address,
        log_file=base.config.log_file,
        uptime_ms=base.uptime_ms,
        node_name=services.node_name,
        ports=lambda: published_ports(base.config.ports, proxy),
        front_doors=lambda: {str(door): url for door, url in proxy.endpoints().items()},
        components=services.supervisor.snapshot,
        errors=services.errors.snapshot,
        fingerprint=base.credentials.credentials.fingerprint,
        cluster_id=lambda: base.members.current.cluster_id,
        placement=lambda: services.settings.view().placement_policy,
        replicas=replicas.status,
        commit=buildinfo.commit(),
    )
    broker_rpc.register(services.dispatcher, status=status, request_shutdown=base.request_shutdown)
