"""Serving a peer's request with this node's engine, and telling the peer when it runs here.

A peer sends a routed request over mutual TLS to this node's relay listener, at
``RELAY_PREFIX`` + door + path (``relay_app.py``): it is served by this node's own engine only
(never routed again), as a single attempt whose failure goes back to the peer unchanged so the
peer can fail over. Its job is kept here too (origin: the peer). ``RELAY_STARTED_PATH`` is a
long poll the peer makes while it waits: it answers once the request holds one of this
engine's slots, so the peer's job reads Running before output.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import msgspec
from aiohttp import web

from backend.protocol.proxy import RouteTarget
from backend.protocol.types.base import JobKey
from backend.workers.proxy.relay.peer_tls import PeerTls

log = logging.getLogger(__name__)

# A peer answers here (long poll) once a relayed request holds one of its engine's slots.
RELAY_STARTED_PATH = "/_pair/relay-started"
STARTED_POLL_S = 30.0
# Set on the relay's 403 to a client whose certificate is not (or no longer) pinned, so the
# sender tells "this peer refused us" from an engine's own 403.
REFUSED_HEADER = "X-PAIR-Refused"


class _Entry(msgspec.Struct):
    started: asyncio.Event = msgspec.field(default_factory=asyncio.Event)
    ended: asyncio.Event = msgspec.field(default_factory=asyncio.Event)
    serving: bool = False


class RelayBoard:
    """Start and end of the peers' requests served here, by ``(job key, attempt)``."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, int], _Entry] = {}

    def serving(self, key: str, attempt: int) -> None:
        """A relayed request arrived."""
        self._entries.setdefault((key, attempt), _Entry()).serving = True

    def started(self, key: str, attempt: int) -> None:
        """It holds a slot (or produced output)."""
        entry = self._entries.get((key, attempt))
        if entry is not None:
            entry.started.set()

    def ended(self, key: str, attempt: int) -> None:
        """It is over; waiting polls answer at once."""
        entry = self._entries.pop((key, attempt), None)
        if entry is not None:
            entry.ended.set()

    async def wait(self, key: str, attempt: int, timeout: float) -> dict[str, bool]:
        """Wait until the request runs or ends (or ``timeout``); what happened."""
        entry = self._entries.setdefault((key, attempt), _Entry())
        try:
            started = asyncio.create_task(entry.started.wait())
            ended = asyncio.create_task(entry.ended.wait())
            try:
                await asyncio.wait({started, ended}, timeout=timeout, return_when="FIRST_COMPLETED")
            finally:
                started.cancel()
                ended.cancel()
            return {"started": entry.started.is_set(), "ended": entry.ended.is_set()}
        finally:
            if not entry.serving:
                self._entries.pop((key, attempt), None)

    def __len__(self) -> int:
        return len(self._entries)


async def started_handler(request: web.Request, board: RelayBoard) -> web.Response:
    """``GET RELAY_STARTED_PATH?job=KEY&attempt=N``: ``{"started", "ended"}``."""
    key = request.query.get("job", "")
    attempt_text = request.query.get("attempt", "")
    if not key or not attempt_text.isdigit():
        return web.json_response(
            {"error": "job (a job key) and attempt (a number) are required"}, status=400
        )
    attempt = int(attempt_text)
    return web.json_response(await board.wait(relay_key(key, attempt), attempt, STARTED_POLL_S))


def relay_key(peer_key: str, attempt: int) -> JobKey:
    """The key of the job kept here for attempt ``attempt`` of the peer's job ``peer_key``."""
    return JobKey(f"{peer_key}@{attempt}")


class PeerStarted:
    """Asks a peer (long poll) when a request this node sent it holds a slot there."""

    def __init__(self, session: aiohttp.ClientSession, peer_tls: PeerTls) -> None:
        self._session = session
        self._tls = peer_tls

    def __call__(self, target: RouteTarget, key: str, attempt: int) -> asyncio.Task[None]:
        """A task that returns once the peer says the request runs; it raises otherwise."""
        return asyncio.create_task(self._poll(target, key, attempt), name=f"relay-started:{key}")

    async def _poll(self, target: RouteTarget, key: str, attempt: int) -> None:
        url = f"{target.base_url.rstrip('/')}{RELAY_STARTED_PATH}"
        params = {"job": key, "attempt": str(attempt)}
        timeout = aiohttp.ClientTimeout(total=STARTED_POLL_S + 10)
        tls = self._tls.client_tls(target)
        while True:
            async with self._session.get(url, params=params, timeout=timeout, ssl=tls) as answer:
                if answer.status != 200:
                    raise LookupError(f"{target.node_id} cannot say when {key} starts")
                state = await answer.json()
            if state.get("started"):
                return
            if state.get("ended"):
                raise LookupError(f"{key} ended at {target.node_id} before it started")
