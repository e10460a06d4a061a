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
from collections.abc import Callable, Container, Coroutine, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from backend.workers.proxy.forward import without_credentials
from backend.workers.proxy.retry import retryable_status
from backend.workers.proxy.watchdog import Watchdog

FAILURE_BODY_LIMIT = 64 * 1024
_HEADERS, _FIRST_CONTENT = "headers", "first content"

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
    """The engine's response, its first body chunk already read (``b""`` at once-EOF), and
    the attempt's watchdog, which the relay goes on with (one timer per request)."""

    upstream: aiohttp.ClientResponse
    first: bytes
    watchdog: Watchdog | None = None

    def discard(self) -> None:
        """Drop the response unanswered: its connection and its timer."""
        self.upstream.close()
        if self.watchdog is not None:
            self.watchdog.close()


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
        self._callbacks: dict[int, Callable[[], None]] = {}

    def is_set(self) -> bool:
        """Whether the node has left."""
        return self._set

    def set(self) -> None:
        """The node left: call every waiter once."""
        if self._set:
            return
        self._set = True
        callbacks, self._callbacks = self._callbacks, {}
        for callback in callbacks.values():
            callback()

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when set; returns what stops that."""
        key = id(callback)
        self._callbacks[key] = callback
        return lambda: self.off(key)

    def off(self, key: int) -> None:
        """Stop calling the callback registered under ``key`` (its ``id``)."""
        self._callbacks.pop(key, None)


@dataclass(eq=False)
class _Watch:
    gone: Gone = field(default_factory=Gone)
    attempts: int = 0


class _Watching:
    """``Departures.watch``'s context: a class, cheaper per attempt than a generator's."""

    __slots__ = ("_departures", "_entry", "_node")

    def __init__(self, departures: Departures, node: str) -> None:
        self._departures = departures
        self._node = node
        self._entry = departures.enter(node)

    def __enter__(self) -> Gone:
        return self._entry.gone

    def __exit__(self, *_: object) -> None:
        self._departures.leave(self._node, self._entry)


class Departures:
    """One "gone" signal per node that attempts are waiting on, set when it leaves the table."""

    def __init__(self) -> None:
        self._watched: dict[str, _Watch] = {}

    def watch(self, node: str) -> _Watching:
        """The signal set once ``node`` leaves the table, while the ``with`` block waits on it."""
        return _Watching(self, node)

    def enter(self, node: str) -> _Watch:
        """One more attempt waits on ``node``."""
        entry = self._watched.get(node)
        if entry is None:
            entry = self._watched[node] = _Watch()
        entry.attempts += 1
        return entry

    def leave(self, node: str, entry: _Watch) -> None:
        """That attempt is done waiting."""
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


class _Race:
    """``unless_gone``'s state: the caller's task, and whether the departure cut its work."""

    __slots__ = ("cut", "done", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.done = False
        self.cut = False

    def later(self) -> None:  # the task may be running now: cut it once it waits
        asyncio.get_running_loop().call_soon(self._cut)

    def _cut(self) -> None:
        if not self.done:
            self.cut = True
            self.task.cancel()


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
    if gone.is_set():
        work.close()
        return Failure("target-gone", f"node {node} left the table")
    task = asyncio.current_task()
    assert task is not None
    race = _Race(task)
    later = race.later
    gone.on_set(later)
    try:
        outcome = await work
    except asyncio.CancelledError:
        if race.cut and task.uncancel() == 0:
            return Failure("target-gone", f"node {node} left the table")
        raise
    finally:
        race.done = True
        gone.off(id(later))
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
    retry_session: aiohttp.ClientSession | None = None,
) -> Commit | Failure:
    """Send the request; return the commit, or why this node cannot serve it now.

    A status that is not retried (2xx, 3xx, most 4xx) commits too: it goes to the client as is.
    ``tls`` is aiohttp's ``ssl=``: a peer's pinned client context (its own connection pool).
    A pooled connection the engine had closed is tried once more through ``retry_session``
    (one that opens a new connection each time; by default ``session``).
    The client's credentials go only to an engine on this computer (``on_this_computer``).
    """
    if not on_this_computer(url, tls):
        headers = without_credentials(headers)
    # One timer for both waits (headers, then the first chunk); a cut wait is a failure.
    # A commit hands it on to the relay.
    watchdog = Watchdog()
    handed = False
    try:
        watchdog.begin(_HEADERS, timeouts.headers)
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
                    URL(url, encoded=True),
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
                # stream) without saying so: one immediate try on a new connection.
                if fresh or isinstance(exc, aiohttp.ClientConnectorError):
                    raise
        raise AssertionError("unreachable: the second try returns or raises")
    except TimeoutError as exc:  # aiohttp's own (connecting): as good as no headers
        return Failure("header-timeout", f"upstream error: {exc or 'no response headers'}")
    except (aiohttp.ClientError, OSError) as exc:
        return Failure("transport", f"upstream error: {exc or type(exc).__name__}")
    finally:
        _ON_SENT.reset(token)
        hook.call = None


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
