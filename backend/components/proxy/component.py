"""The broker side of the front doors: the listening sockets and the supervised proxy worker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
from cryptography.hazmat.primitives import serialization

from backend.common.certificates import NodeCredentials
from backend.common.self_command import self_argv
from backend.common.tasks import wait_first
from backend.components.engines.component import EnginesComponent
from backend.components.engines.manifest import SchedulerSpec
from backend.components.engines.slots import routing_slots
from backend.components.proxy.custody import CustodyDesk, Progress
from backend.components.proxy.demand import DemandInbox
from backend.components.proxy.exclusive_gate import WorkerGate
from backend.components.proxy.handover import ListenerHandover, listener_handover
from backend.components.proxy.listeners import (
    EVERY_ADDRESS,
    RELAY,
    Listener,
    ListenerName,
    door_host,
    door_port_owned_message,
    door_port_taken_message,
    lan_bind_message,
    listen_tcp,
    listener_on,
    open_listener,
    port_taken_error_id,
    port_taken_message,
    rebind,
)
from backend.components.proxy.table import LocalEngine
from backend.core.clock import Clock
from backend.core.component import Component
from backend.core.supervisor import ErrorSink
from backend.core.worker import WorkerProcess
from backend.protocol import errors, methods
from backend.protocol.errors import BadResult
from backend.protocol.proxy import (
    DOORS,
    DemandReport,
    Door,
    LocalUse,
    ModelSwitched,
    ProxyIdentity,
    ProxyTargets,
    SlotApi,
)
from backend.protocol.types.apikeys import KeysUsed
from backend.protocol.types.base import EngineName
from backend.protocol.types.broker import Ports
from backend.protocol.types.results import Ok
from backend.protocol.types.scheduler import SchedulerStates
from backend.protocol.worker_methods import (
    PROXY_CLOSE_LISTENERS,
    PROXY_DEMAND,
    PROXY_IDENTITY,
    PROXY_JOBS,
    PROXY_JOBS_STORED,
    PROXY_KEYS_USED,
    PROXY_LOAD_MODEL,
    PROXY_SCHEDULER,
    PROXY_SCHEDULER_GET,
    PROXY_TARGETS,
)

log = logging.getLogger(__name__)

TARGETS_INTERVAL_S = 0.1
# A table unchanged this long is looked for every ``TARGETS_IDLE_INTERVAL_S`` instead, and at
# once when a source says it changed (``look_now``): building it from every source ten times a
# second was most of an idle broker's timers and a third of its CPU. The first change found
# goes back to ``TARGETS_INTERVAL_S``; ``table_applied`` sends a changed table at once. Short,
# so a node whose table changes with each telemetry sample (a GPU's) rests between them.
TARGETS_IDLE_AFTER_S = 0.5
TARGETS_IDLE_INTERVAL_S = 2.0
SCHEDULER_GET_TIMEOUT_S = 2.0
# How long an RPC that changed the table (an alias, a key, a setting) waits for the worker to
# route by it before it answers anyway (``settled``).
SETTLE_TIMEOUT_S = 2.0
# The worker's reports (job events, a job's end before its client's last byte) are safe in its
# stdout pipe from the moment it writes them: read them in bursts this far apart rather than
# waking for each request (``backend/core/paced_pipe.py``). Job events reach the app this much
# later at most; heartbeats and calls are answered well within their timeouts.
WORKER_READ_PACE_S = 0.02
LAN_BINDING_ERROR = "proxy:lan-binding"


class ProxyComponent(Component):
    """Owns the proxy's listening sockets (the front doors and the relay, kept across worker
    restarts), the proxy worker process (via a ``WorkerProcess``) and the loop that sends it
    the node's identity once per start, then the routing table whenever it changes.

    Ready when the worker answers its first heartbeat (where the listeners reach it after its
    start, on Windows, once it has taken them all). ``close_front_doors()`` is the first
    shutdown stage; ``stop()`` then ends the worker. ``move_doors()`` moves doors to other
    ports while everything runs: the new socket is handed to the running worker (``handover``:
    over a Unix socket, or shared over its RPC channel on Windows), which starts accepting
    there before it stops on the old one. ``worker_command`` starts the worker (``pair worker
    proxy``, its listener arguments appended).
    The doors follow the table's ``lan_access`` the same way (loopback only while it is off;
    ``listeners.door_host``) unless ``host`` pins every listener to one address (tests).
    """

    kind = "worker"
    ready_on_start = False

    def __init__(
        self,
        *,
        ports: Ports,
        errors: ErrorSink,
        clock: Clock,
        targets: Callable[[], ProxyTargets],
        credentials: NodeCredentials,
        host: str | None = None,
        environment: Callable[[], dict[str, str]] = dict,
        on_job: Callable[[Any], None] = lambda event: None,
        on_keys_used: Callable[[KeysUsed], None] = lambda report: None,
        on_worker_exit: Callable[[frozenset[str]], None] = lambda kept: None,
        job_progress: Progress = lambda job: None,
        on_scheduler: Callable[[SchedulerStates], None] = lambda states: None,
        on_demand: Callable[[DemandReport], None] | None = None,
        load_model: Callable[[str, str], Awaitable[int]] | None = None,
        jobs_stored: Callable[[], Awaitable[None]] | None = None,
        jobs_journal: Path | None = None,
        door_ports: Callable[[], Mapping[Door, int]] = dict,
        heartbeat_interval: float = 1.0,
        targets_interval: float = TARGETS_INTERVAL_S,
        handover: ListenerHandover | None = None,
        worker_command: Sequence[str] | None = None,
    ) -> None:
        super().__init__("proxy")
        self._wanted: dict[ListenerName, int] = {
            "ollama": ports.ollama,
            "openai": ports.openai,
            "llamacpp": ports.llamacpp,
            RELAY: ports.relay,
        }
        self._configured = dict(self._wanted)
        self._door_ports = door_ports  # the settings' ports; 0 or absent: the configured one
        self._served: dict[Door, Listener] = {}  # the sockets the current worker accepts on
        self._retired: list[Listener] = []  # moved away from, closed once no worker serves them
        self._handover = handover or listener_handover()  # how the worker gets the sockets
        self._worker_command = list(worker_command or self_argv("worker", "proxy"))
        self._moving = asyncio.Lock()
        self._custody = CustodyDesk(job_progress)
        self._errors = errors
        self._clock = clock
        self._targets = targets
        self._identity = identity_payload(credentials)
        self._host = host
        self._lan: bool | None = None  # the lan_access the doors are bound for
        self._environment = environment
        self._on_job = on_job
        self._on_keys_used = on_keys_used
        self._on_worker_exit = on_worker_exit
        self._on_scheduler = on_scheduler
        self._load_model = load_model
        self._jobs_stored = jobs_stored
        self._jobs_journal = jobs_journal  # where the workers journal job ends
        self._scheduler = SchedulerStates(engines=[])
        self._demand = DemandInbox(on_demand)  # the worker's demand reports (demand.py)
        self.gate = WorkerGate(lambda: self._worker)
        self._heartbeat_interval = heartbeat_interval
        self._targets_interval = targets_interval
        self._targets_idle_interval = max(TARGETS_IDLE_INTERVAL_S, targets_interval)
        self._table_changed_at = clock.monotonic()
        self._look = asyncio.Event()  # a source changed: look at once (``look_now``)
        self._doors: dict[Door, Listener] = {}
        self._relay: Listener | None = None
        self._worker: WorkerProcess | None = None
        self._sent_to: tuple[WorkerProcess, ProxyTargets] | None = None  # last table sent

    def endpoints(self) -> dict[Door, str]:
        """The real URL of each open front door."""
        return {door: front_door.url() for door, front_door in self._doors.items()}

    def ports(self) -> dict[Door, int]:
        """The port each open front door is bound to."""
        return {door: front_door.port for door, front_door in self._doors.items()}

    def relay_port(self) -> int | None:
        """The port the relay listener is bound to, while it is open."""
        return self._relay.port if self._relay is not None else None

    def scheduler_states(self) -> SchedulerStates:
        """The local engines' schedulers as the worker last reported them."""
        return self._scheduler

    def last_local_use(self) -> list[LocalUse]:
        """Each local engine model's last use (and how many run it now), as reported."""
        return self._demand.last_local_use()

    def bind_demand(self, on_demand: Callable[[DemandReport], None]) -> None:
        """Hand the worker's demand reports to ``on_demand`` from now on (the replica
        planner, built after the proxy: it calls members through the federation)."""
        self._demand.bind(on_demand)

    async def fetch_scheduler(self) -> SchedulerStates | None:
        """The schedulers now, asked of the worker; None when it cannot answer."""
        worker = self._worker
        if worker is None or worker.pid() is None:
            return None
        try:
            answer = await worker.call(PROXY_SCHEDULER_GET.name, timeout=SCHEDULER_GET_TIMEOUT_S)
            return PROXY_SCHEDULER_GET.decode_result(answer)
        except errors.RpcError as exc:
            log.info("the proxy worker did not report its schedulers: %s", exc)
            return None

    async def table_applied(self) -> None:
        """Return once the running worker routes by the table of now: it was sent, and the
        worker answered a ping sent after it (its channel keeps order, and it adopts a table
        as it reads it). Raises ``Unavailable`` while no worker runs."""
        while True:
            worker = self._worker
            if worker is None or worker.pid() is None:
                raise errors.Unavailable("the proxy worker is not running")
            sent = self._sent_to
            if sent is not None and sent[0] is worker:  # its identity went first
                current = self._targets()
                if sent[1] != current:
                    self._send_table(worker, current)
                break
            await self._clock.sleep(self._targets_interval)
        await worker.call(methods.PING.name)

    async def settled(self) -> None:
        """``table_applied``, for an RPC that changed a source of the table: waits at most
        ``SETTLE_TIMEOUT_S``, and not at all while no worker runs (the next one starts with
        the table of then). Never raises: the change is made either way."""
        try:
            async with asyncio.timeout(SETTLE_TIMEOUT_S):
                await self.table_applied()
        except (TimeoutError, errors.RpcError) as exc:
            log.info("a change answered before the proxy worker applied it: %r", exc)

    def pid(self) -> int | None:
        """The proxy worker's PID while it runs."""
        return self._worker.pid() if self._worker is not None else None

    async def run(self) -> None:
        """Open the listeners once, then run one worker and feed it until it exits."""
        if not self._doors:
            self._open_listeners()
        worker = self._build_worker()
        self._worker = worker
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(worker.run(), name="proxy:worker")
                group.create_task(self._send_targets(worker), name="proxy:targets")
        except BaseExceptionGroup as group_error:
            raise _first_leaf(group_error) from None
        finally:
            kept = self._custody.worker_gone()
            self._worker_gone()
            # Whatever the worker held is gone with it: its jobs end, they do not stay Running,
            # except those whose requests wait with us for the next worker (custody.py).
            self._on_worker_exit(kept)
            self._demand.worker_gone()
            if self._scheduler.engines:
                self._scheduler = SchedulerStates(engines=[])
                self._on_scheduler(self._scheduler)

    async def stop(self) -> None:
        """Close the listeners, then end the worker."""
        await self.close_front_doors()
        if self._worker is not None:
            await self._worker.stop()
        self._custody.close()

    async def close_front_doors(self) -> None:
        """Stop accepting connections on the doors and the relay (worker and broker copies);
        requests in flight go on."""
        if self._worker is not None:
            self._worker.notify(PROXY_CLOSE_LISTENERS.name)
            await asyncio.sleep(0)
        for listener in [*self._listeners(), *self._retired]:
            with contextlib.suppress(OSError):
                listener.sock.close()
        # A later run() (after a restart request) opens them again.
        self._doors = {}
        self._relay = None
        self._retired = []

    def _listeners(self) -> list[Listener]:
        return [*self._doors.values(), *([self._relay] if self._relay is not None else [])]

    def _open_listeners(self) -> None:
        for door, port in self._door_ports().items():
            self._wanted[door] = port or self._configured[door]
        self._lan = self._targets().lan_access
        for door in DOORS:
            self._doors[door] = self._open(door)
        self._relay = self._open(RELAY)

    def _open(self, name: ListenerName) -> Listener:
        # A taken port gets the same treatment for the relay as for a door: another free port
        # and a warning. Peers read the relay's real port from node-info, so routing follows.
        listener = open_listener(name, self._host_for(name), self._wanted[name])
        if listener.moved:
            message = port_taken_message(listener)
            log.warning("%s", message)
            self._errors.raise_error(port_taken_error_id(name), message, severity="warning")
        else:
            self._errors.clear_error(port_taken_error_id(name))
        return listener

    def _host_for(self, name: ListenerName) -> str:
        if self._host is not None:
            return self._host
        # The relay answers paired computers (mutual TLS) on every address, always.
        return EVERY_ADDRESS if name == RELAY else door_host(bool(self._lan))

    def _build_worker(self) -> WorkerProcess:
        start = self._handover.start(self._doors, self._relay)
        argv = [*self._worker_command, *start.argv]
        if self._jobs_journal is not None:
            argv += ["--jobs-journal", str(self._jobs_journal)]
        passed = list(start.pass_fds)
        kept = self._custody.open()
        if kept is not None:
            argv += ["--custody-fd", str(kept.fileno())]
            passed.append(kept.fileno())
        self._served = dict(self._doors)
        worker = WorkerProcess(
            "proxy",
            argv,
            clock=self._clock,
            heartbeat_interval=self._heartbeat_interval,
            read_pace=WORKER_READ_PACE_S,
            environment=self._environment,
            on_notification=self._notification,
            on_request=self._request,
            pass_fds=passed,
            on_started=self._deliver if self._handover.delivers_after_start else None,
        )
        worker.bind_ready(self.announce_ready)
        return worker

    async def _deliver(self, worker: WorkerProcess) -> None:
        """The listeners the worker's start could not carry, as they are now (a move waits),
        before the worker counts as ready: ready still means that it holds every door."""
        async with self._moving:
            doors = dict(self._doors)
            await self._handover.deliver(worker, doors, self._relay)
            self._served = doors
            self._close_retired()

    def _notification(self, method: str, params: Any) -> None:
        if method == PROXY_JOBS.name:
            # Each event is checked where it is applied; a batch that is no list is dropped.
            events = params.get("events") if isinstance(params, dict) else None
            if not isinstance(events, list):
                log.error("ignoring a malformed batch of job events: %.200r", params)
                return
            for event in events:
                self._on_job(event)
        elif method == PROXY_SCHEDULER.name:
            try:
                self._scheduler = PROXY_SCHEDULER.decode(params)
            except BadResult as exc:
                log.error("ignoring a malformed scheduler state: %s", exc)
                return
            self._on_scheduler(self._scheduler)
        elif method == PROXY_DEMAND.name:
            self._demand.received(params)
        elif method == PROXY_KEYS_USED.name:
            try:
                self._on_keys_used(PROXY_KEYS_USED.decode(params))
            except BadResult as exc:
                log.error("ignoring a malformed report of key use: %s", exc)

    async def _request(self, method: str, params: Any) -> Any:
        """The worker asks: a model switch of a drained engine, or that the job events it sent
        be stored (then it deletes the journal segments that hold them)."""
        if method == PROXY_JOBS_STORED.name and self._jobs_stored is not None:
            await self._jobs_stored()
            return msgspec.to_builtins(Ok(ok=True))
        if method != PROXY_LOAD_MODEL.name or self._load_model is None:
            raise errors.MethodNotFound(f"Method not found: {method}")
        switch = PROXY_LOAD_MODEL.convert_params(params)
        instance = await self._load_model(switch.engine, switch.model)
        return msgspec.to_builtins(ModelSwitched(instance=instance))

    async def _send_targets(self, worker: WorkerProcess) -> None:
        """The identity first (once per worker), then every table that differs from the last,
        looked for at the active pace, or at rest at the idle one and when ``look_now`` says.

        The stdio channel keeps order, so the worker has its identity before its first table.
        """
        identity_sent = False
        while True:
            if worker.pid() is not None:
                if not identity_sent:
                    worker.notify(PROXY_IDENTITY.name, msgspec.to_builtins(self._identity))
                    identity_sent = True
                if self._served != self._doors and not self._moving.locked():
                    await self._follow_moves(worker)
                current = self._targets()
                lan_changed = self._host is None and current.lan_access != self._lan
                if lan_changed and not self._moving.locked():
                    await self._follow_lan(worker, current.lan_access)
                sent = self._sent_to
                if sent is None or sent[0] is not worker or sent[1] != current:
                    self._send_table(worker, current)
            await self._next_look()

    def look_now(self) -> None:
        """A source of the routing table changed: look for a new table at once."""
        self._look.set()

    async def _next_look(self) -> None:
        """Wait the active pace, or while the table rests, the idle one or a ``look_now``."""
        if self._clock.monotonic() - self._table_changed_at < TARGETS_IDLE_AFTER_S:
            self._look.clear()  # the next look comes within the active pace anyway
            await self._clock.sleep(self._targets_interval)
            return
        if not self._look.is_set():
            await wait_first(
                self._clock.sleep(self._targets_idle_interval),
                self._look.wait(),
                name="proxy:table-rest",
            )
        self._look.clear()

    def _send_table(self, worker: WorkerProcess, current: ProxyTargets) -> None:
        worker.notify(PROXY_TARGETS.name, msgspec.to_builtins(current))
        self._sent_to = (worker, current)
        self._table_changed_at = self._clock.monotonic()

    # Doors moved at run time.

    async def move_doors(self, ports: Mapping[Door, int]) -> None:
        """Serve each door of ``ports`` on its port (0: the configured one) from now on, all or
        none: a port that cannot be listened on raises ``Conflict`` and every door stays (or
        goes back) where it was. The old port stops accepting once the new one does."""
        async with self._moving:
            moved: dict[Door, int] = {}
            try:
                for door, port in ports.items():
                    before = self._doors[door].port if door in self._doors else None
                    await self._move(door, port or self._configured[door])
                    if before is not None:
                        moved[door] = before
            except BaseException:
                for door, before in moved.items():
                    with contextlib.suppress(errors.RpcError):
                        await self._move(door, before)
                raise

    async def _move(self, door: Door, port: int) -> None:
        current = self._doors.get(door)
        if current is None or current.port == port:
            self._wanted[door] = port  # closed (or not opened yet): it opens there
            return
        owner = listener_on(self._listeners(), port)
        if owner is not None:
            message = door_port_owned_message(door, port, current.port, owner)
            raise errors.Conflict(message, {"door": door, "port": port})
        try:
            listener = Listener(door, port, listen_tcp(self._host_for(door), port))
        except OSError as exc:
            message = door_port_taken_message(door, port, current.port, exc)
            raise errors.Conflict(message, {"door": door, "port": port}) from None
        worker = self._worker
        try:
            # A worker that did not take it is gone: the next one starts on the new socket.
            if worker is not None:
                await self._hand_over(worker, door, listener)
        except BaseException:
            listener.sock.close()
            raise
        self._doors[door], self._wanted[door] = listener, port
        self._errors.clear_error(port_taken_error_id(door))
        log.info("the %s front door moved from port %d to %d", door, current.port, port)
        self._retire(current)

    async def _hand_over(self, worker: WorkerProcess, door: Door, listener: Listener) -> bool:
        """Have the worker accept on ``listener`` for ``door``, and no more on the old socket;
        whether it does. One that was told but did not answer is stopped (what it read from
        the channel is unknown): its successor starts on the sockets of ``_doors``."""
        if worker.pid() is None:
            return False  # no worker runs now: the next one starts on the new socket
        try:
            await self._handover.hand_over(worker, door, listener)
        except errors.RpcError as exc:
            log.error("the proxy worker did not take the %s door (%s); restarting it", door, exc)
            await worker.stop()
            return False
        self._served[door] = listener
        return True

    async def _follow_moves(self, worker: WorkerProcess) -> None:
        """A worker started on a socket that moved meanwhile is handed the new one; one that
        cannot take it is stopped, and its successor starts on the right sockets."""
        async with self._moving:
            for door, listener in list(self._doors.items()):
                moved = self._served.get(door) is not listener
                if moved and not await self._hand_over(worker, door, listener):
                    return
            self._close_retired()

    async def _follow_lan(self, worker: WorkerProcess, lan: bool) -> None:
        """Re-bind every door where ``lan`` says, on its port, handing each new socket to
        the worker as a move does; a door that cannot be re-bound stays where it is (warned).
        """
        async with self._moving:
            self._lan, host = lan, door_host(lan)
            for door, current in list(self._doors.items()):
                if current.host == host:
                    continue
                try:
                    listener = rebind(current, host)
                except OSError as exc:
                    message = lan_bind_message(door, host, current.host, exc)
                    log.warning("%s", message)
                    self._errors.raise_error(LAN_BINDING_ERROR, message, severity="warning")
                    return
                await self._hand_over(worker, door, listener)  # or the next worker takes it
                self._doors[door] = listener
                self._retire(current)
            self._errors.clear_error(LAN_BINDING_ERROR)
            log.info("the front doors listen on %s", "every address" if lan else "loopback only")

    def _retire(self, listener: Listener) -> None:
        self._retired.append(listener)
        self._close_retired()

    def _close_retired(self) -> None:
        """Close our copy of every moved-from socket no worker accepts on any more."""
        serving = [*self._served.values()]
        for listener in [r for r in self._retired if r not in serving]:
            self._retired.remove(listener)
            with contextlib.suppress(OSError):
                listener.sock.close()

    def _worker_gone(self) -> None:
        self._served = {}
        self._close_retired()
        self._handover.close()


def identity_payload(credentials: NodeCredentials) -> ProxyIdentity:
    """The ``proxy:identity`` payload: the certificate and the key in unencrypted PKCS8 PEM.

    Sending the key in the clear is acceptable here: it travels only over the worker's private
    stdio pipe to our own child process, which runs as the same user and could read the key
    file (or the keyring entry) itself. It never touches the disk or a socket on the way.
    """
    key_pem = credentials.private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return ProxyIdentity(cert_pem=credentials.cert_pem.decode(), key_pem=key_pem.decode())


def local_engines(engines: EnginesComponent) -> dict[str, LocalEngine]:
    """This node's running engines with their last listed models, slot counts and what their
    schedulers need. An engine PAIR is relaunching (a restart, a model switch, an update) stays
    in the table, so the requests queued at its scheduler wait for it instead of failing over.
    """
    listed, counted = engines.last_models(), engines.last_slots()
    digests, _ = engines.last_weights()
    found: dict[str, LocalEngine] = {}
    for name, controller in engines.controllers.items():
        if not (controller.running or controller.relaunching) or name not in listed:
            continue
        manifest = controller.manifest
        # Only a running engine has counts: one being relaunched gets the manifest's default.
        slots = routing_slots(manifest.slots, controller.status().slots, counted.get(name, {}))
        spec = manifest.scheduler
        current = controller.current_model
        resident = [current] if current else list(listed[name][1] or [])
        found[name] = LocalEngine(
            controller.base_url(),
            list(listed[name][0] or []),
            slots.slots,
            model_slots=dict(slots.per_model),
            resident=resident,
            single_model=spec is not None and spec.single_model,
            instance=controller.instance,
            slot_api=slot_api_of(spec, controller.slot_dir),
            # An adopted engine's environment is not PAIR's to read: its slot count is a guess.
            slots_known=not (controller.status().adopted and manifest.slots.source == "env"),
            resident_known=bool(current) or listed[name][1] is not None,
            api_key=controller.api_key,
            digests=digests.get(EngineName(name), {}),
        )
    return found


def slot_api_of(spec: SchedulerSpec | None, slot_dir: Path) -> SlotApi | None:
    """The routing table's slot API of an engine whose manifest names one (``slot_dir`` is
    the folder it saves slots to, its ``--slot-save-path``)."""
    if spec is None or spec.slots_path is None or spec.erase_path is None:
        return None
    parking = spec.save_path is not None and spec.restore_path is not None
    return SlotApi(
        list_path=spec.slots_path,
        erase_path=spec.erase_path,
        field=spec.slot_field,
        save_path=spec.save_path,
        restore_path=spec.restore_path,
        park_dir=str(slot_dir) if parking else None,
    )


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first
