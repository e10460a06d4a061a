"""The router's ways out of the process, built once by the worker's composition root."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import msgspec

from backend.protocol.proxy import RouteTarget
from backend.workers.proxy.channels.custody import Custody
from backend.workers.proxy.channels.jobs import JobLog
from backend.workers.proxy.relay.peer_tls import PeerTls
from backend.workers.proxy.scheduler.engine_access import LoadModel
from backend.workers.proxy.upstream.engine_client import EngineClient

# Asks a peer when a request sent there holds a slot: a task that returns once it does.
PeerStartedProbe = Callable[[RouteTarget, str, int], asyncio.Task[None]]


class Links(msgspec.Struct, frozen=True):
    """The upstream clients and the channels to the broker that every request shares.

    ``session`` pools connections per upstream and TLS context; ``retry_session`` opens new
    ones only (the second try after a pooled connection turned out closed); ``engines`` is the
    lean plain-HTTP client for this computer's engines. ``jobs`` and ``custody`` talk to the
    broker, which also switches models (``load_model``); ``on_started`` hears that a job runs,
    ``on_scheduler_change`` that a scheduler's state changed.
    """

    session: aiohttp.ClientSession
    retry_session: aiohttp.ClientSession
    engines: EngineClient
    peer_tls: PeerTls
    jobs: JobLog
    custody: Custody
    load_model: LoadModel
    on_started: Callable[[str, int], None]
    on_scheduler_change: Callable[[], None]
    peer_started: PeerStartedProbe | None = None
