"""The broker side of the front doors: the listening sockets and the supervised proxy worker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
from cryptography.hazmat.primitives import serialization

from backend.common.self_command import self_argv
from backend.components.engines.component import EnginesComponent
from backend.components.engines.manifest import SchedulerSpec
from backend.components.identity.certificate import NodeCredentials
from backend.components.proxy.exclusive_gate import WorkerGate
from backend.components.proxy.listeners import (
    RELAY,
    Listener,
    ListenerName,
    open_listener,
    port_taken_error_id,
    port_taken_message,
)
from backend.components.proxy.table import LocalEngine
from backend.core.clock import Clock
from backend.core.component import Component
from backend.core.supervisor import ErrorSink
from backend.core.worker import WorkerProcess
from backend.protocol import errors
from backend.protocol.errors import BadResult
from backend.protocol.proxy import (
    DOORS,
    Door,
    ModelSwitched,
    ProxyIdentity,
    ProxyTargets,
    SlotApi,
)
from backend.protocol.types import Ports, SchedulerStates
from backend.protocol.worker_methods import (
    PROXY_CLOSE_LISTENERS,
    PROXY_IDENTITY,
    PROXY_JOB,
    PROXY_LOAD_MODEL,
    PROXY_SCHEDULER,
    PROXY_SCHEDULER_GET,
    PROXY_TARGETS,
)

log = logging.getLogger(__name__)

TARGETS_INTERVAL_S = 0.1
SCHEDULER_GET_TIMEOUT_S = 2.0


class ProxyComponent(Component):
    """Owns the proxy's listening sockets (the front doors and the relay, kept across worker
    restarts), the proxy worker process (via a ``WorkerProcess``) and the loop that sends it
    the node's identity once per start, then the routing table whenever it changes.

    Ready when the worker answers its first heartbeat. ``close_front_doors()`` is the first
    shutdown stage; ``stop()`` then ends the worker.
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
        host: str = "0.0.0.0",
        environment: Callable[[], dict[str, str]] = dict,
        on_job: Callable[[Any], None] = lambda event: None,
        on_worker_exit: Callable[[], None] = lambda: None,
        on_scheduler: Callable[[SchedulerStates], None] = lambda states: None,
        load_model: Callable[[str, str], Awaitable[int]] | None = None,
        heartbeat_interval: float = 1.0,
        targets_interval: float = TARGETS_INTERVAL_S,
    ) -> None:
        super().__init__("proxy")
        self._wanted: dict[ListenerName, int] = {
            "ollama": ports.ollama,
            "openai": ports.openai,
            "llamacpp": ports.llamacpp,
            RELAY: ports.relay,
        }
        self._errors = errors
        self._clock = clock
        self._targets = targets
        self._identity = identity_payload(credentials)
        self._host = host
        self._environment = environment
        self._on_job = on_job
        self._on_worker_exit = on_worker_exit
        self._on_scheduler = on_scheduler
        self._load_model = load_model
        self._scheduler = SchedulerStates(engines=[])
        self.gate = WorkerGate(lambda: self._worker)
        self._heartbeat_interval = heartbeat_interval
        self._targets_interval = targets_interval
        self._doors: dict[Door, Listener] = {}
        self._relay: Listener | None = None
        self._worker: WorkerProcess | None = None

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
            # Whatever the worker held is gone with it: its jobs end, they do not stay Running.
            self._on_worker_exit()
            if self._scheduler.engines:
                self._scheduler = SchedulerStates(engines=[])
                self._on_scheduler(self._scheduler)

    async def stop(self) -> None:
        """Close the listeners, then end the worker."""
        await self.close_front_doors()
        if self._worker is not None:
            await self._worker.stop()

    async def close_front_doors(self) -> None:
        """Stop accepting connections on the doors and the relay (worker and broker copies);
        requests in flight go on."""
        if self._worker is not None:
            self._worker.notify(PROXY_CLOSE_LISTENERS.name)
            await asyncio.sleep(0)
        for listener in self._listeners():
            with contextlib.suppress(OSError):
                listener.sock.close()
        # A later run() (after a restart request) opens them again.
        self._doors = {}
        self._relay = None

    def _listeners(self) -> list[Listener]:
        return [*self._doors.values(), *([self._relay] if self._relay is not None else [])]

    def _open_listeners(self) -> None:
        for door in DOORS:
            self._doors[door] = self._open(door)
        self._relay = self._open(RELAY)

    def _open(self, name: ListenerName) -> Listener:
        # A taken port gets the same treatment for the relay as for a door: another free port
        # and a warning. Peers read the relay's real port from node-info, so routing follows.
        listener = open_listener(name, self._host, self._wanted[name])
        if listener.moved:
            message = port_taken_message(listener)
            log.warning("%s", message)
            self._errors.raise_error(port_taken_error_id(name), message, severity="warning")
        else:
            self._errors.clear_error(port_taken_error_id(name))
        return listener

    def _build_worker(self) -> WorkerProcess:
        argv = self_argv("worker", "proxy")
        for door, front_door in self._doors.items():
            argv += ["--fd", f"{door}={front_door.sock.fileno()}"]
        if self._relay is not None:
            argv += ["--relay-fd", str(self._relay.sock.fileno())]
        worker = WorkerProcess(
            "proxy",
            argv,
            clock=self._clock,
            heartbeat_interval=self._heartbeat_interval,
            environment=self._environment,
            on_notification=self._notification,
            on_request=self._request,
            pass_fds=[listener.sock.fileno() for listener in self._listeners()],
        )
        worker.bind_ready(self.announce_ready)
        return worker

    def _notification(self, method: str, params: Any) -> None:
        if method == PROXY_JOB.name:
            self._on_job(params)
        elif method == PROXY_SCHEDULER.name:
            try:
                self._scheduler = PROXY_SCHEDULER.decode(params)
            except BadResult as exc:
                log.error("ignoring a malformed scheduler state: %s", exc)
                return
            self._on_scheduler(self._scheduler)

    async def _request(self, method: str, params: Any) -> Any:
        """The worker asks: only for a model switch of a drained engine."""
        if method != PROXY_LOAD_MODEL.name or self._load_model is None:
            raise errors.MethodNotFound(f"Method not found: {method}")
        switch = PROXY_LOAD_MODEL.convert_params(params)
        instance = await self._load_model(switch.engine, switch.model)
        return msgspec.to_builtins(ModelSwitched(instance=instance))

    async def _send_targets(self, worker: WorkerProcess) -> None:
        """The identity first (once per worker), then every table that differs from the last.

        The stdio channel keeps order, so the worker has its identity before its first table.
        """
        sent: ProxyTargets | None = None
        identity_sent = False
        while True:
            if worker.pid() is not None:
                if not identity_sent:
                    worker.notify(PROXY_IDENTITY.name, msgspec.to_builtins(self._identity))
                    identity_sent = True
                current = self._targets()
                if current != sent:
                    worker.notify(PROXY_TARGETS.name, msgspec.to_builtins(current))
                    sent = current
            await self._clock.sleep(self._targets_interval)


def identity_payload(credentials: NodeCredentials) -> ProxyIdentity:
    """The ``proxy/identity`` payload: the certificate and the key in unencrypted PKCS8 PEM.

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
    listed = engines.last_models()
    found: dict[str, LocalEngine] = {}
    for name, controller in engines.controllers.items():
        if not (controller.running or controller.relaunching) or name not in listed:
            continue
        manifest = controller.manifest
        slots = controller.status().slots or manifest.slots.default
        spec = manifest.scheduler
        current = controller.current_model
        resident = [current] if current else list(listed[name][1] or [])
        found[name] = LocalEngine(
            controller.base_url(),
            list(listed[name][0] or []),
            slots,
            resident=resident,
            single_model=spec is not None and spec.single_model,
            instance=controller.instance,
            slot_api=slot_api_of(spec, controller.slot_dir),
            # An adopted engine's environment is not PAIR's to read: its slot count is a guess.
            slots_known=not (controller.status().adopted and manifest.slots.source == "env"),
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
