"""One dispatch of a request to one node, up to its commit point (the first body byte).

Before the commit nothing reaches the client, so a failure can still go to another node.
``precommit`` sends the request and waits, within the header and first-content timeouts, for
either a failure (kept so the last one can be answered with) or the first body byte.
``unless_gone`` races that wait against the node leaving the routing table: the attempt owns
both and ends itself, so nothing outside it cancels the request's handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import ssl
from collections.abc import Callable, Container, Coroutine, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from backend.workers.proxy.forward import without_credentials
from backend.workers.proxy.retry import retryable_status

FAILURE_BODY_LIMIT = 64 * 1024

FailureKind = Literal["transport", "header-timeout", "status", "no-content", "target-gone"]


@dataclass(frozen=True, slots=True)
class Failure:
    """An attempt that ended before its commit; ``status`` etc. only for ``status`` failures."""

    kind: FailureKind
    message: str
    status: int | None = None
    headers: CIMultiDictProxy[str] | None = None
    body: bytes = b""


@dataclass(slots=True)
class Commit:
    """The engine's response, its first body chunk already read (``b""`` at once-EOF)."""

    upstream: aiohttp.ClientResponse
    first: bytes


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds to wait for the response headers, then for the first body byte after them."""

    headers: float
    first_content: float


class Gone:
    """Set once a node leaves the routing table; calls what waits on it (no task per wait)."""

    __slots__ = ("_callbacks", "_set")

    def __init__(self) -> None:
        self._set = False
        self._callbacks: list[Callable[[], None]] = []

    def is_set(self) -> bool:
        """Whether the node has left."""
        return self._set

    def set(self) -> None:
        """The node left: call every waiter once."""
        if self._set:
            return
        self._set = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when set; returns what stops that."""
        self._callbacks.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return remove


@dataclass(eq=False)
class _Watch:
    gone: Gone = field(default_factory=Gone)
    attempts: int = 0


class Departures:
    """One "gone" signal per node that attempts are waiting on, set when it leaves the table."""

    def __init__(self) -> None:
        self._watched: dict[str, _Watch] = {}

    @contextlib.contextmanager
    def watch(self, node: str) -> Iterator[Gone]:
        """The signal set once ``node`` leaves the table, while the ``with`` block waits on it."""
        entry = self._watched.setdefault(node, _Watch())
        entry.attempts += 1
        try:
            yield entry.gone
        finally:
            entry.attempts -= 1
            # A node that left and came back has a fresh entry: leave that one alone.
            if entry.attempts == 0 and self._watched.get(node) is entry:
                del self._watched[node]

    def table_changed(self, present: Container[str]) -> None:
        """Signal every watched node that is not in the new table."""
        for node in [node for node in self._watched if node not in present]:
            self._watched.pop(node).gone.set()

    def __len__(self) -> int:
        return len(self._watched)


async def unless_gone(
    work: Coroutine[Any, Any, Commit | Failure], gone: Gone, node: str
) -> Commit | Failure:
    """Run ``work`` (a ``precommit``) until it ends or ``gone`` is set, whichever comes first.

    When the node goes first the attempt cancels its own upstream request (closing the
    connection, so the engine stops working on it) and ends with a ``target-gone`` failure.
    A client that disconnects cancels the caller, and with it the work. The work runs in the
    caller's task: the departure cancels that task's current wait, from a callback that does
    nothing once the work has its outcome.
    """
    left = Failure("target-gone", f"node {node} left the table")
    if gone.is_set():
        work.close()
        return left
    task = asyncio.current_task()
    assert task is not None
    state = {"done": False, "cut": False}

    def cut() -> None:
        if not state["done"]:
            state["cut"] = True
            task.cancel()

    def later() -> None:  # the task may be running now: cut it once it waits
        asyncio.get_running_loop().call_soon(cut)

    stop = gone.on_set(later)
    try:
        outcome = await work
    except asyncio.CancelledError:
        if state["cut"] and task.uncancel() == 0:
            return left
        raise
    finally:
        state["done"] = True
        stop()
    return outcome


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
) -> Commit | Failure:
    """Send the request; return the commit, or why this node cannot serve it now.

    A status that is not retried (2xx, 3xx, most 4xx) commits too: it goes to the client as is.
    ``tls`` is aiohttp's ``ssl=``: a peer's pinned client context (its own connection pool).
    The client's credentials go only to an engine on this computer (``on_this_computer``).
    """
    if not on_this_computer(url, tls):
        headers = without_credentials(headers)
    hook = _SentHook(sent)
    token = _ON_SENT.set(hook)
    try:
        async with _timeout(timeouts.headers):
            for fresh in (False, True):
                try:
                    upstream = await session.request(
                        method,
                        URL(url, encoded=True),
                        headers=headers,
                        data=body,
                        allow_redirects=False,
                        ssl=tls,
                    )
                    if sent is not None:
                        sent()  # the answer came: the engine has the request (if not before)
                    break
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                    # An engine may close an idle pooled connection (llama-server does after
                    # a stream) without saying so: one immediate try on a new connection.
                    if fresh or isinstance(exc, aiohttp.ClientConnectorError):
                        raise
    except TimeoutError:
        return Failure(
            "header-timeout",
            f"upstream error: no response headers within {timeouts.headers:g} s",
        )
    except (aiohttp.ClientError, OSError) as exc:
        return Failure("transport", f"upstream error: {exc or type(exc).__name__}")
    finally:
        _ON_SENT.reset(token)
        hook.call = None
    try:
        if retryable_status(upstream.status, inference=inference):
            return await _status_failure(upstream)
        try:
            async with _timeout(timeouts.first_content):
                first = await upstream.content.readany()
        except TimeoutError:
            upstream.close()
            return Failure(
                "no-content",
                f"the engine sent no content within {timeouts.first_content:g} s",
            )
        except (aiohttp.ClientError, OSError) as exc:
            upstream.close()
            return Failure("transport", f"upstream error: {exc or type(exc).__name__}")
        return Commit(upstream, first)
    except BaseException:
        upstream.close()
        raise


def on_this_computer(url: str, tls: ssl.SSLContext | bool) -> bool:
    """Whether ``url`` is plain HTTP to a loopback address: an engine of this computer.

    A peer (HTTPS to its relay: it trusts this computer by mutual TLS, not by the client's
    credentials) and an engine added by another address are not, so they get none of the
    client's credentials; engines added by address have no key of their own to send instead.
    """
    if isinstance(tls, ssl.SSLContext):
        return False
    return _loopback_http(url)


@functools.lru_cache(maxsize=256)  # asked per attempt, of a few engines' URLs
def _loopback_http(url: str) -> bool:
    parts = URL(url, encoded=True)
    if parts.scheme != "http" or parts.host is None:
        return False
    if parts.host == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.host).is_loopback
    except ValueError:
        return False


async def _status_failure(upstream: aiohttp.ClientResponse) -> Failure:
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

    __slots__ = ("call",)

    def __init__(self, call: Callable[[], None] | None) -> None:
        self.call = call


# The hook of the request being sent in this task (and the body-writer task aiohttp starts
# from it, which copies the context).
_ON_SENT: ContextVar[_SentHook | None] = ContextVar("pair_on_sent", default=None)


class SentRequest(aiohttp.ClientRequest):
    """aiohttp's request, calling ``precommit``'s ``sent`` once the body (and so the headers
    before it) is written: until then the engine has not got the request (it may not even be
    listening), so the job must not read Running however free the engine's slots are.

    The session's ``request_class``; much cheaper than a ``TraceConfig``, which makes every
    request await a dozen signals."""

    async def write_bytes(self, *args: Any, **kwargs: Any) -> None:
        await super().write_bytes(*args, **kwargs)
        hook = _ON_SENT.get()
        if hook is not None and hook.call is not None:
            hook.call()


def _timeout(seconds: float) -> asyncio.Timeout:
    return asyncio.timeout(seconds if seconds > 0 else None)
