"""Talking to another node's API during pairing: learn its certificate, then post messages to it
over TLS pinned to exactly that certificate (and, once paired, over mutual TLS)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import TypeVar

import aiohttp
import msgspec

from backend.common import tls
from backend.common.certificates import NodeCredentials
from backend.common.hostport import url_host
from backend.core.plain_errors import plain_error
from backend.protocol.types.nodes import NodeInfo

T = TypeVar("T")
TIMEOUT_S = 10.0
MAX_ANSWER_BYTES = 256 * 1024


class PeerUnreachable(Exception):
    """The other node did not answer, or answered with something that is not the protocol."""


def pinned_anonymous_context(peer_cert_der: bytes) -> ssl.SSLContext:
    """TLS 1.3 that accepts only ``peer_cert_der`` and shows no certificate of ours (the peer has
    not pinned it yet, and TLS refuses a client certificate it does not know)."""
    context = tls.unverified_client_context(None)
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=ssl.DER_cert_to_PEM_cert(peer_cert_der))
    return context


async def server_certificate(address: str, port: int) -> bytes:
    """The certificate the node at ``address:port`` presents (not verified: compared later)."""
    context = tls.unverified_client_context(None)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            _, writer = await asyncio.open_connection(address, port, ssl=context)
    except (OSError, ssl.SSLError, TimeoutError) as exc:
        raise PeerUnreachable(plain_error(exc, f"{url_host(address)}:{port}")) from None
    try:
        der = tls.peer_certificate(writer.transport)
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):  # closing a broken connection
            await writer.wait_closed()
    if der is None:
        raise PeerUnreachable(f"{address}:{port} presented no certificate")
    return der


async def node_info(address: str, port: int) -> NodeInfo:
    """``GET /v1/node-info`` over TLS without verification (node-info is public)."""
    context = tls.unverified_client_context(None)
    url = f"https://{url_host(address)}:{port}/v1/node-info"
    return await _request("GET", url, context, None, NodeInfo)


async def post(
    address: str, port: int, path: str, body: msgspec.Struct, context: ssl.SSLContext, kind: type[T]
) -> T:
    """POST ``body`` to ``path``; the answer (2xx or 4xx with a JSON body) decoded as ``kind``."""
    url = f"https://{url_host(address)}:{port}{path}"
    return await _request("POST", url, context, msgspec.json.encode(body), kind)


def mutual_context(credentials: NodeCredentials, peer_cert_der: bytes) -> ssl.SSLContext:
    """Mutual TLS to a member: our certificate, and only ``peer_cert_der`` accepted."""
    return tls.client_context(credentials, peer_cert_der)


async def _request(
    method: str, url: str, context: ssl.SSLContext, body: bytes | None, kind: type[T]
) -> T:
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    connector = aiohttp.TCPConnector(ssl=context, force_close=True)
    headers = {"Content-Type": "application/json"} if body is not None else None
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout, connector=connector) as session,
            session.request(method, url, data=body, headers=headers) as response,
        ):
            raw = await response.content.read(MAX_ANSWER_BYTES + 1)
            status = response.status
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise PeerUnreachable(plain_error(exc, url)) from None
    return decode_answer(url, status, raw, kind)


def decode_answer(url: str, status: int, raw: bytes, kind: type[T]) -> T:
    """A peer's answer decoded as ``kind``; ``PeerUnreachable`` for a 5xx, an oversized body or
    a body that is not one (also JSON nested too deep to decode)."""
    if len(raw) > MAX_ANSWER_BYTES or status >= 500:
        raise PeerUnreachable(f"{url} answered {status}")
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as exc:
        raise PeerUnreachable(f"{url} answered {status} with an unexpected body: {exc}") from None
    except (msgspec.DecodeError, RecursionError):
        raise PeerUnreachable(f"{url} answered {status} without JSON") from None
