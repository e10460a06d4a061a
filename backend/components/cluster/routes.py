"""The cluster's routes on the node API: the pairing exchange for anyone, ``/v1/cluster/*`` only
for a client whose TLS certificate matches a pin byte for byte (anything else: 403).

Members' routes: ``hello`` (the pairing's last step), ``roster`` (merge the sender's roster,
answer with ours) and ``members/remove`` (a signed removal proof).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec
from aiohttp import web

from backend.common import tls
from backend.components.cluster import messages as m
from backend.components.cluster import roster as r
from backend.components.cluster.inviter import ProtocolViolation
from backend.components.cluster.members import Member
from backend.components.cluster.merge import RosterRefused
from backend.components.cluster.roster_keeper import RemovedHere
from backend.components.cluster.service import ClusterService

M = TypeVar("M", bound=m.Message)
MAX_MESSAGE_BYTES = 64 * 1024


def add_routes(app: web.Application, service: ClusterService) -> None:
    """Add the pairing and member routes to the node API ``app``."""

    async def offer(request: web.Request) -> web.Response:
        body = await _read(request, m.InviteOffer)
        return _answer(service.handle_offer(body, _remote(request)))

    async def start(request: web.Request) -> web.Response:
        return _answer(service.handle_start(await _read(request, m.Start)))

    async def confirm(request: web.Request) -> web.Response:
        return _answer(service.handle_confirm(await _read(request, m.Confirm)))

    async def finish(request: web.Request) -> web.Response:
        body = await _read(request, m.Finish)
        return _answer(await service.handle_finish(body, _remote(request)))

    async def cancel(request: web.Request) -> web.Response:
        return _answer(service.handle_cancel(await _read(request, m.InviteEnd)))

    async def hello(request: web.Request) -> web.Response:
        cert = _peer_cert(request)
        if cert is None or service.membership.pin_for(cert) is None:
            return _forbidden()
        return _answer(await service.handle_hello(await _read(request, m.Hello), cert))

    async def roster(request: web.Request) -> web.Response:
        sender = member_of(service, request)
        if sender is None:
            return _forbidden()
        body = await _read(request, r.Roster, r.MAX_ROSTER_BYTES)
        try:
            answer = await service.roster.handle_roster(body, sender, _remote(request))
        except RosterRefused as exc:
            return _json(409, {"error": str(exc)})
        except RemovedHere:
            return _json(409, {"error": "this computer was removed from the cluster just now"})
        return _answer(answer)

    async def remove(request: web.Request) -> web.Response:
        if member_of(service, request) is None:
            return _forbidden()
        body = await _read(request, r.RemovalNotice)
        try:
            return _answer(await service.roster.handle_removal(body))
        except RosterRefused as exc:
            return _json(400, {"error": str(exc)})

    for path, handler in (
        (r.ROSTER_PATH, roster),
        (r.REMOVE_PATH, remove),
        (m.INVITE_PATH, offer),
        (m.START_PATH, start),
        (m.CONFIRM_PATH, confirm),
        (m.FINISH_PATH, finish),
        (m.CANCEL_PATH, cancel),
        (m.HELLO_PATH, hello),
    ):
        app.router.add_post(path, _protocol_errors(handler))


MEMBERS_ONLY = "this route is for members of this node's cluster only"


def member_of(service: ClusterService, request: web.Request) -> Member | None:
    """The trusted (not provisional) member that made ``request``, if any."""
    cert = _peer_cert(request)
    member = service.membership.pin_for(cert) if cert is not None else None
    return member if member is not None and not member.provisional else None


def member_or_forbidden(service: ClusterService, request: web.Request) -> Member:
    """The trusted member that made ``request``; anyone else gets a 403 (the backstop behind
    the members-only middleware, which answers first)."""
    member = member_of(service, request)
    if member is None:
        raise web.HTTPForbidden(reason=MEMBERS_ONLY)
    return member


@web.middleware
async def members_only(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """403 for every ``/v1/cluster/*`` route (but the pairing's hello) without a trusted pin."""
    service: ClusterService | None = request.app.get(SERVICE_KEY)
    path = request.path
    guarded = path.startswith("/v1/cluster/") and path != m.HELLO_PATH
    if guarded and (service is None or member_of(service, request) is None):
        return _forbidden()
    return await handler(request)


SERVICE_KEY: web.AppKey[ClusterService] = web.AppKey("cluster_service", ClusterService)


def _protocol_errors(
    handler: Callable[[web.Request], Awaitable[web.Response]],
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def guarded(request: web.Request) -> web.Response:
        try:
            return await handler(request)
        except ProtocolViolation as exc:
            return _json(400, {"error": str(exc)})

    return guarded


async def _read(request: web.Request, kind: type[M], limit: int = MAX_MESSAGE_BYTES) -> M:
    raw = bytearray()
    while len(raw) <= limit:  # ``read(n)`` answers with what has arrived, maybe less than n
        chunk = await request.content.read(limit + 1 - len(raw))
        if not chunk:
            break
        raw += chunk
    if len(raw) > limit:
        raise ProtocolViolation("message too large")
    try:
        return msgspec.json.decode(raw, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ProtocolViolation(f"malformed {kind.__name__}: {exc}") from None


def _peer_cert(request: web.Request) -> bytes | None:
    return tls.peer_certificate(request.transport)


def _remote(request: web.Request) -> str:
    return request.remote or ""


def _answer(message: m.Message) -> web.Response:
    return web.Response(
        status=200, body=msgspec.json.encode(message), content_type="application/json"
    )


def _forbidden() -> web.Response:
    return _json(403, {"error": MEMBERS_ONLY})


def _json(status: int, body: dict[str, str]) -> web.Response:
    return web.Response(
        status=status, body=msgspec.json.encode(body), content_type="application/json"
    )
