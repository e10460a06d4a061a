"""The proxy worker's notifications, declared once (see ``contract.py``).

The broker sends its proxy worker the node's TLS identity (once per worker start), the routing
table and, at shutdown, the order to stop accepting connections; the worker sends the broker
jobs' numbered events (in batches). They travel on the worker's stdio JSON-RPC channel, never on the
broker's client surface (``methods.py``).
"""

from __future__ import annotations

from typing import Final

from backend.protocol.contract import Method, NoParams, Push
from backend.protocol.proxy import (
    DemandReport,
    DoorHandover,
    DoorServed,
    ExclusiveLease,
    LeaseRef,
    ListenerTaken,
    ModelSwitch,
    ModelSwitched,
    ProxyIdentity,
    ProxyTargets,
    SharedListener,
)
from backend.protocol.types.apikeys import KeysUsed
from backend.protocol.types.jobs import JobEvents
from backend.protocol.types.results import Ok
from backend.protocol.types.scheduler import SchedulerStates

PROXY_IDENTITY: Final[Push[ProxyIdentity]] = Push(
    "proxy:identity",
    ProxyIdentity,
    "broker to worker: the node's certificate and key for the relay, once when it starts",
)
PROXY_TARGETS: Final[Push[ProxyTargets]] = Push(
    "proxy:targets", ProxyTargets, "broker to worker: the routing table, whenever it changes"
)
PROXY_CLOSE_LISTENERS: Final[Push[None]] = Push(
    "proxy:close-listeners",
    type(None),
    "broker to worker: stop accepting connections; requests in flight go on",
)
PROXY_JOBS: Final[Push[JobEvents]] = Push(
    "proxy:jobs",
    JobEvents,
    "worker to broker: jobs' numbered events in the order they happened, applied in seq order",
)
PROXY_JOBS_STORED: Final = Method(
    "proxy:jobs-stored",
    NoParams,
    Ok,
    "worker to broker: answered once every job event sent before it is in the store (the worker"
    " then deletes the journal segments holding them)",
)
PROXY_SCHEDULER: Final[Push[SchedulerStates]] = Push(
    "proxy:scheduler",
    SchedulerStates,
    "worker to broker: the local engines' schedulers, whenever they change (at most 4 a second)",
)
PROXY_DEMAND: Final[Push[DemandReport]] = Push(
    "proxy:demand",
    DemandReport,
    "worker to broker: demand per model and the local engines' use, about once a second while"
    " anything changed (the replica planner's input)",
)
PROXY_EXCLUSIVE: Final = Method(
    "proxy:exclusive",
    ExclusiveLease,
    Ok,
    "broker to worker: answered once the operation may run alone on the drained engine",
)
PROXY_EXCLUSIVE_END: Final[Push[LeaseRef]] = Push(
    "proxy:exclusive-end",
    LeaseRef,
    "broker to worker: the exclusive operation ended (or its caller gave up waiting)",
)
PROXY_SCHEDULER_GET: Final = Method(
    "proxy:scheduler-get", NoParams, SchedulerStates, "broker to worker: the schedulers now"
)
PROXY_LOAD_MODEL: Final = Method(
    "proxy:load-model",
    ModelSwitch,
    ModelSwitched,
    "worker to broker: relaunch a one-model engine with another model (it is drained)",
)
PROXY_ADOPT_DOOR: Final = Method(
    "proxy:adopt-door",
    DoorHandover,
    DoorServed,
    "broker to worker: serve the door on the socket just handed over, then stop accepting on"
    " its old one (requests in flight go on)",
)
PROXY_KEYS_USED: Final[Push[KeysUsed]] = Push(
    "proxy:keys-used",
    KeysUsed,
    "worker to broker: the LAN API keys the doors admitted, and when (at most every 15 s)",
)
PROXY_TAKE_LISTENER: Final = Method(
    "proxy:take-listener",
    SharedListener,
    ListenerTaken,
    "broker to worker (Windows): a listener shared with the worker's PID, once each after its"
    " start and whenever a door moves; a door already served accepts on it, then no more on its"
    " old socket",
)
