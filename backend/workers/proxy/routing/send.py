"""Send one attempt to its node and read it up to the commit: headers, TLS, the peer's refusal.

Each node is sent the request under its own name for the model (a replica's name on another
engine, or the model a user's alias stands for: ``identity.py``); the body is re-encoded only
when that name differs from the one the client asked for.
"""

from __future__ import annotations

import msgspec
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from backend.protocol.proxy import RouteTarget
from backend.workers.proxy.relay.peer_tls import NoIdentity
from backend.workers.proxy.relay.serving import REFUSED_HEADER
from backend.workers.proxy.routing.admission import (
    ATTEMPT_HEADER,
    JOB_HEADER,
    ORIGIN_HEADER,
    Admission,
    Dispatch,
)
from backend.workers.proxy.routing.candidates import upstream_url
from backend.workers.proxy.routing.identity import name_at
from backend.workers.proxy.routing.links import Links
from backend.workers.proxy.upstream.attempt import Commit, Failure, Timeouts, precommit
from backend.workers.proxy.upstream.forward import request_headers


async def send(
    links: Links,
    request: web.Request,
    admission: Admission,
    dispatch: Dispatch,
    body: bytes,
    timeouts: Timeouts,
) -> Commit | Failure:
    """Forward the request to the attempt's node; its response once the first body byte came."""
    target = dispatch.target
    try:
        tls = links.peer_tls.client_tls(target)
    except NoIdentity as exc:
        return Failure("transport", str(exc))
    name = name_at(target, admission.model)
    if name != admission.model:
        body = with_model(body, name)
    outcome = await precommit(
        links.session,
        request.method,
        upstream_url(target, dispatch.path(admission)),
        _headers(request, dispatch),
        body,
        timeouts,
        inference=admission.inference,
        sent=dispatch.mark_sent,
        tls=tls,
        retry_session=links.retry_session,
        engines=links.engines,
    )
    if isinstance(outcome, Commit) and refused_by_peer(target, outcome):
        # The peer no longer trusts this computer (it removed us after the handshake of a
        # kept-alive connection): that is not the client's answer, another node may serve.
        outcome.discard()
        return Failure("transport", f"node {target.node_id} refused this computer")
    return outcome


def with_model(body: bytes, model: str) -> bytes:
    """``body`` (a JSON object) naming ``model`` instead (the client's own when it is no
    object: the engine answers it as it would have)."""
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return body
    if not isinstance(decoded, dict):
        return body
    decoded["model"] = model
    return msgspec.json.encode(decoded)


def _headers(request: web.Request, dispatch: Dispatch) -> CIMultiDict[str]:
    """The client's headers as the attempt's node gets them."""
    target = dispatch.target
    # Only this node's own engine sees the client's credentials: a bare engine added by
    # address has no key of its own here, and peers authenticate by mutual TLS.
    headers = request_headers(request, credentials=target.kind == "local")
    if target.kind == "peer":
        headers[ORIGIN_HEADER] = dispatch.job.origin
        headers[JOB_HEADER] = dispatch.job.key
        headers[ATTEMPT_HEADER] = str(dispatch.attempt)
    return headers


def refused_by_peer(target: RouteTarget, commit: Commit) -> bool:
    """Whether a peer's relay turned this computer away (not the engine's own 403)."""
    upstream = commit.upstream
    return target.kind == "peer" and upstream.status == 403 and REFUSED_HEADER in upstream.headers


def reply_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """The headers of a failed attempt worth keeping when it is answered as the final one."""
    return CIMultiDict(
        (name, value)
        for name, value in headers.items()
        if name.lower() in ("content-type", "retry-after")
    )
