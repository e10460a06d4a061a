"""The proxy worker's notifications, declared once (see ``contract.py``).

The broker sends its proxy worker the node's TLS identity (once per worker start), the routing
table and, at shutdown, the order to stop accepting connections; the worker sends the broker
each job's numbered events. They travel on the worker's stdio JSON-RPC channel, never on the
broker's client surface (``methods.py``).
"""

from __future__ import annotations

from typing import Final

from backend.protocol.contract import Push
from backend.protocol.proxy import ProxyIdentity, ProxyTargets
from backend.protocol.types import JobEvent

PROXY_IDENTITY: Final[Push[ProxyIdentity]] = Push(
    "proxy/identity",
    ProxyIdentity,
    "broker to worker: the node's certificate and key for the relay, once when it starts",
)
PROXY_TARGETS: Final[Push[ProxyTargets]] = Push(
    "proxy/targets", ProxyTargets, "broker to worker: the routing table, whenever it changes"
)
PROXY_CLOSE_LISTENERS: Final[Push[None]] = Push(
    "proxy/close-listeners",
    type(None),
    "broker to worker: stop accepting connections; requests in flight go on",
)
PROXY_JOB: Final[Push[JobEvent]] = Push(
    "proxy/job", JobEvent, "worker to broker: one numbered event of a job, applied in seq order"
)
