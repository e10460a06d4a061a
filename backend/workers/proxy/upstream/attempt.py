"""One dispatch of a request to one node, up to its commit point (the first body byte).

Before the commit nothing reaches the client, so a failure can still go to another node.
``precommit`` sends the request and waits, within the header and first-content timeouts, for
either a failure (kept so the last one can be answered with) or the first body byte;
``departures.unless_gone`` races that wait against the node leaving the routing table.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import ssl
import weakref
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, Literal

import aiohttp
import msgspec
from aiohttp.connector import Connection
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from backend.workers.proxy.upstream.answer import Upstream
from backend.workers.proxy.upstream.engine_client import (
    CONNECT_TIMEOUT_S,
    EngineClient,
    EngineConnectionError,
    StaleConnection,
)
from backend.workers.proxy.upstream.forward import without_credentials
from backend.workers.proxy.upstream.watchdog import Watchdog

FAILURE_BODY_LIMIT = 64 * 1024
_HEADERS, _FIRST_CONTENT = "headers", "first content"

FailureKind = Literal["transport", "header-timeout", "status", "no-content", "target-gone"]


class Failure(msgspec.Struct, frozen=True):
    """An attempt that ended before its commit; ``status`` etc. only for ``status`` failures."""

    kind: FailureKind
    message: str
    status: int | None = None
    headers: CIMultiDictProxy[str] | None = None
    body: bytes = b""


class Commit(msgspec.Struct):
    """The engine's response, its first body chunk already read (``b""`` at once-EOF), and
    the attempt's watchdog, which the relay goes on with (one per request)."""

    upstream: Upstream
    first: bytes
    watchdog: Watchdog | None = None

    def discard(self) -> None:
        """Drop the response unanswered: its connection and its timer."""
        self.upstream.close()
        if self.watchdog is not None:
            self.watchdog.close()


def retryable_status(status: int, *, inference: bool) -> bool:
    """Before the first body byte: retry 408, 429, 5xx but 501 and 505, and 404 on inference
    routes only.

    A 404 from an engine whose inventory said it had the model means the inventory was stale.
    501 ("not supported": llama-server without embeddings, say) and 505 are the engine's
    deterministic answer to this request: another try gets the same, only later.
    """
    if status in (501, 505):
        return False
    if status in (408, 429) or status >= 500:
        return True
    return status == 404 and inference


class Timeouts(msgspec.Struct, frozen=True, gc=False):
    """Seconds to wait for the response headers, then for the first body byte after them."""

    headers: float
    first_content: float


async def precommit(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    headers: Mapping[str, str] | CIMultiDict[str],
    body: bytes | None,
    timeouts: Timeouts,
    *,
    inference: bool,
    sent: Callable[[], None] | None = None,
    tls: ssl.SSLContext | bool = True,
    retry_session: aiohttp.ClientSession | None = None,
    engines: EngineClient | None = None,
) -> Commit | Failure:
    """Send the request; return the commit, or why this node cannot serve it now.

    A status that is not retried (2xx, 3xx, most 4xx) commits too: it goes to the client as is.
    ``tls`` is aiohttp's ``ssl=``: a peer's pinned client context (its own connection pool).
    A pooled connection the engine had closed is tried once more through ``retry_session``
    (one that opens a new connection each time; by default ``session``).
    The client's credentials go only to an engine on this computer (``on_this_computer``).
    With ``engines``, a request in plain HTTP goes through that lean client instead of
    ``session`` (``engine_client.py``); HTTPS (peers) always goes through ``session``.
    """
    if not on_this_computer(url, tls):
        headers = without_credentials(headers)
    # One timer for both waits (headers, then the first chunk); a cut wait is a failure.
    # A commit hands it on to the relay.
    watchdog = Watchdog()
    handed = False
    try:
        watchdog.begin(_HEADERS, timeouts.headers)
        sent_out: Upstream | Failure
        if engines is not None and _lean(url, method, tls):
            sent_out = await _send_lean(engines, method, url, headers, body, sent)
        else:
            sessions = (session, retry_session or session)
            sent_out = await _send(sessions, method, url, headers, body, sent, tls)
        if isinstance(sent_out, Failure):
            return sent_out
        upstream = sent_out
        try:
            if retryable_status(upstream.status, inference=inference):
                watchdog.end()
                return await _status_failure(upstream)
            watchdog.begin(_FIRST_CONTENT, timeouts.first_content)
            try:
                first = await upstream.content.readany()
            except (aiohttp.ClientError, OSError) as exc:
                upstream.close()
                return Failure("transport", f"upstream error: {exc or type(exc).__name__}")
            watchdog.end()
            handed = True
            return Commit(upstream, first, watchdog)
        except BaseException:
            upstream.close()
            raise
    except asyncio.CancelledError:
        fired = watchdog.fired
        if fired is None or not watchdog.uncancel():
            raise
        if fired == _HEADERS:
            return Failure(
                "header-timeout",
                f"upstream error: no response headers within {timeouts.headers:g} s",
            )
        return Failure(
            "no-content", f"the engine sent no content within {timeouts.first_content:g} s"
        )
    finally:
        if not handed:
            watchdog.close()


async def _send(
    sessions: tuple[aiohttp.ClientSession, aiohttp.ClientSession],
    method: str,
    url: str,
    headers: Mapping[str, str] | CIMultiDict[str],
    body: bytes | None,
    sent: Callable[[], None] | None,
    tls: ssl.SSLContext | bool,
) -> aiohttp.ClientResponse | Failure:
    """The engine's response once its headers are in, or why there is none."""
    hook = _SentHook(sent)
    token = _ON_SENT.set(hook)
    try:
        for fresh, session in enumerate(sessions):
            try:
                upstream = await session.request(
                    method,
                    _url(url),
                    headers=headers,
                    data=body,
                    allow_redirects=False,
                    ssl=tls,
                )
                if sent is not None:
                    sent()  # the answer came: the engine has the request (if not before)
                return upstream
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                # An engine may close an idle pooled connection (llama-server does after a
                # stream) without saying so: one immediate try on a new connection. A new
                # connection that breaks is no such race: the engine may have the request
                # already, and it is not sent to it twice.
                if fresh or hook.reused is False or isinstance(exc, aiohttp.ClientConnectorError):
                    raise
        raise AssertionError("unreachable: the second try returns or raises")
    except TimeoutError as exc:  # aiohttp's own (connecting): as good as no headers
        return Failure("header-timeout", f"upstream error: {exc or 'no response headers'}")
    except (aiohttp.ClientError, OSError) as exc:
        return Failure("transport", f"upstream error: {exc or type(exc).__name__}")
    finally:
        _ON_SENT.reset(token)
        hook.call = None


async def _send_lean(
    engines: EngineClient,
    method: str,
    url: str,
    headers: Mapping[str, str] | CIMultiDict[str],
    body: bytes | None,
    sent: Callable[[], None] | None,
) -> Upstream | Failure:
    """``_send`` through the lean client: the same tries, the same failures."""
    parsed = _url(url)
    for fresh in (False, True):
        try:
            upstream = await engines.request(method, parsed, headers, body, fresh=fresh, sent=sent)
        except StaleConnection:
            continue  # a pooled connection the engine had closed: once more, on a new one
        except EngineConnectionError as exc:
            return Failure("transport", f"upstream error: {exc}")
        except TimeoutError:
            return Failure(
                "header-timeout",
                f"upstream error: no connection to {parsed.host}:{parsed.port} "
                f"within {CONNECT_TIMEOUT_S:g} s",
            )
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            where = f"{parsed.host}:{parsed.port}"
            return Failure("transport", f"upstream error: cannot connect to {where}: {reason}")
        except ValueError as exc:
            return Failure("transport", f"upstream error: {exc}")
        if sent is not None:
            sent()  # the answer came: the engine has the request (if not before)
        return upstream
    raise AssertionError("unreachable: a new connection is never a stale one")


def _lean(url: str, method: str, tls: ssl.SSLContext | bool) -> bool:
    """Whether the lean client can send this: plain HTTP, and an answer with a body."""
    return not isinstance(tls, ssl.SSLContext) and method != "HEAD" and _url(url).scheme == "http"


def on_this_computer(url: str, tls: ssl.SSLContext | bool) -> bool:
    """Whether ``url`` is plain HTTP to a loopback address: an engine of this computer.

    A peer (HTTPS to its relay: it trusts this computer by mutual TLS, not by the client's
    credentials) and an engine added by another address are not, so they get none of the
    client's credentials; engines added by address have no key of their own to send instead.
    """
    if isinstance(tls, ssl.SSLContext):
        return False
    return _loopback_http(url)


@functools.lru_cache(maxsize=1024)  # per attempt: a few engines' URLs, a few paths each
def _url(url: str) -> URL:
    """``url`` parsed (yarl's URLs are immutable)."""
    return URL(url, encoded=True)


@functools.lru_cache(maxsize=256)  # asked per attempt, of a few engines' URLs
def _loopback_http(url: str) -> bool:
    parts = _url(url)
    if parts.scheme != "http" or parts.host is None:
        return False
    if parts.host == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.host).is_loopback
    except ValueError:
        return False


async def _status_failure(upstream: Upstream) -> Failure:
    body = b""
    with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
        async with _timeout(5.0):
            body = await upstream.content.read(FAILURE_BODY_LIMIT)
    upstream.close()
    return Failure(
        "status",
        f"the engine answered {upstream.status} {upstream.reason or ''}".strip(),
        status=upstream.status,
        headers=upstream.headers,
        body=body,
    )


class _SentHook:
    """``precommit``'s ``sent`` callback, emptied once the response headers are in: a timer or
    a task made meanwhile copies the context, and must not keep the request alive with it."""

    __slots__ = ("call", "reused")

    def __init__(self, call: Callable[[], None] | None) -> None:
        self.call = call
        # Whether the request went on a connection an earlier request had used (None: not
        # known, the session's ``request_class`` is not ``SentRequest``).
        self.reused: bool | None = None


# The hook of the request being sent in this task (and the body-writer task aiohttp starts
# from it, which copies the context).
_ON_SENT: ContextVar[_SentHook | None] = ContextVar("pair_on_sent", default=None)
# The connections (their protocols) requests have gone on, for ``_SentHook.reused``.
_USED: weakref.WeakSet[object] = weakref.WeakSet()


class SentRequest(aiohttp.ClientRequest):
    """aiohttp's request, calling ``precommit``'s ``sent`` once the body (and so the headers
    before it) is written: until then the engine has not got the request (it may not even be
    listening), so the job must not read Running however free the engine's slots are.

    It also notes whether the connection it goes on is a reused one (``_send`` tries a broken
    one again only then). The session's ``request_class``; much cheaper than a
    ``TraceConfig``, which makes every request await a dozen signals."""

    async def send(self, conn: Connection) -> aiohttp.ClientResponse:
        protocol = conn.protocol
        reused = protocol in _USED
        if not reused and protocol is not None:
            _USED.add(protocol)
        hook = _ON_SENT.get()
        if hook is not None:
            hook.reused = reused
        return await super().send(conn)

    async def write_bytes(self, *args: Any, **kwargs: Any) -> None:
        await super().write_bytes(*args, **kwargs)
        hook = _ON_SENT.get()
        if hook is not None and hook.call is not None:
            hook.call()


def _timeout(seconds: float) -> asyncio.Timeout:
    return asyncio.timeout(seconds if seconds > 0 else None)
