"""Serving JSON-RPC: method routing with typed params, the set of connected clients, pushes."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, Generic, Protocol, TypeVar

import msgspec

from backend.common.listeners import Listeners
from backend.protocol import errors
from backend.protocol.contract import Method, Push
from backend.protocol.peer import RpcPeer

log = logging.getLogger(__name__)
# Set while a handler runs for a call made by a method's former name (``Method.former``): a
# subscription made so gets its pushes by their former names too.
_CALLED_BY_FORMER_NAME: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "called_by_former_name", default=False
)
P = TypeVar("P")
R = TypeVar("R")
E = TypeVar("E")


class _Route(msgspec.Struct, Generic[P, R], frozen=True):
    method: Method[P, R]
    handler: Callable[[P, RpcPeer], Awaitable[R]]

    async def __call__(self, params: Any, peer: RpcPeer) -> R:
        return await self.handler(self.method.convert_params(params), peer)


class Forwarder(Protocol):
    """Answers a call meant for another node (its params name that node), or declines it."""

    async def __call__(self, method: Method[Any, Any], params: Any) -> Any:
        """The other node's answer, or ``NOT_FORWARDED`` to handle the call here."""


NOT_FORWARDED: Final = object()


class Dispatcher:
    """Routes declared methods to handlers; params are converted by the method's declaration
    (malformed ones are answered with -32602 naming the field). Calls of ``forwarded`` methods
    go to the forwarder first, which may answer them from another node."""

    def __init__(self) -> None:
        self._routes: dict[str, _Route[Any, Any]] = {}
        self._forwarded: frozenset[str] = frozenset()
        self._forwarder: Forwarder | None = None
        self._settled: frozenset[str] = frozenset()
        self._settle: Callable[[], Awaitable[None]] | None = None

    def forward(self, methods: Iterable[Method[Any, Any]], forwarder: Forwarder) -> None:
        """Offer every call of ``methods`` to ``forwarder`` before its handler."""
        self._forwarded = frozenset(method.name for method in methods)
        self._forwarder = forwarder

    def settle_after(
        self, methods: Iterable[Method[Any, Any]], settle: Callable[[], Awaitable[None]]
    ) -> None:
        """Answer a call of ``methods`` handled here only once ``settle()`` returns: a change
        that takes effect elsewhere (the routing table in the proxy worker) has taken effect
        when its caller hears it was made. ``settle`` bounds its own wait and does not raise."""
        self._settled = frozenset(method.name for method in methods)
        self._settle = settle

    def add(self, method: Method[P, R], handler: Callable[[P, RpcPeer], Awaitable[R]]) -> None:
        """Route ``method`` (and its former name) to ``handler(params, peer)``, once each."""
        names = (method.name,) if method.former is None else (method.name, method.former)
        for name in names:
            if name in self._routes:
                raise ValueError(f"method {name!r} is already routed")
        for name in names:
            self._routes[name] = _Route(method, handler)

    def methods(self) -> list[str]:
        """Every routed method name (current names only)."""
        return sorted(name for name, route in self._routes.items() if route.method.name == name)

    async def __call__(self, method: str, params: Any, peer: RpcPeer) -> Any:
        """Handle one request (the ``on_request`` hook of an ``RpcPeer``)."""
        route = self._routes.get(method)
        if route is None:
            raise errors.MethodNotFound(f"Method not found: {method}")
        if method != route.method.name:
            token = _CALLED_BY_FORMER_NAME.set(True)
            try:
                return await self._handle(route, params, peer)
            finally:
                _CALLED_BY_FORMER_NAME.reset(token)
        return await self._handle(route, params, peer)

    async def _handle(self, route: _Route[Any, Any], params: Any, peer: RpcPeer) -> Any:
        if self._forwarder is not None and route.method.name in self._forwarded:
            converted = route.method.convert_params(params)
            answer = await self._forwarder(route.method, converted)
            if answer is not NOT_FORWARDED:
                return answer
            result = await route.handler(converted, peer)
        else:
            result = await route(params, peer)
        if self._settle is not None and route.method.name in self._settled:
            await self._settle()
        return result


class ClientHub:
    """The connected clients (stdio parent and control-socket clients) and pushes to them."""

    def __init__(self) -> None:
        self._clients: set[RpcPeer] = set()
        self._on_leave: list[Callable[[RpcPeer], None]] = []

    def __len__(self) -> int:
        return len(self._clients)

    def add(self, peer: RpcPeer) -> None:
        """A client connected."""
        self._clients.add(peer)

    def remove(self, peer: RpcPeer) -> None:
        """A client left; subscriptions it held are dropped."""
        self._clients.discard(peer)
        for callback in self._on_leave:
            callback(peer)

    def on_leave(self, callback: Callable[[RpcPeer], None]) -> None:
        """Call ``callback(peer)`` whenever a client leaves."""
        self._on_leave.append(callback)

    def broadcast(self, push: Push[E], payload: E) -> None:
        """Push a notification to every client."""
        for peer in list(self._clients):
            peer.notify(push.name, payload)

    async def close_all(self, timeout: float) -> None:
        """Stop reading from every client, flush what they are owed, and wait (bounded)."""
        peers = list(self._clients)
        for peer in peers:
            peer.close()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*(peer.wait_closed() for peer in peers))
        except TimeoutError:
            log.warning("some clients did not disconnect within %.1f s", timeout)


class NumberedStream(Generic[E]):
    """Events with a monotonic ``seq`` delivered to subscribed clients after their snapshot."""

    def __init__(self, push: Push[E], hub: ClientHub) -> None:
        self._push = push
        self._subscribers: set[RpcPeer] = set()
        # Subscribers that asked by a method's former name: they get the push's former name.
        self._by_former_name: set[RpcPeer] = set()
        self.seq = 0
        self._listeners = Listeners()
        hub.on_leave(self.unsubscribe)

    def on_publish(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after each event is numbered (with subscribers or none)."""
        self._listeners.add(listener)

    def subscribe(self, peer: RpcPeer) -> int:
        """Add ``peer``; returns the ``seq`` its snapshot corresponds to."""
        self._subscribers.add(peer)
        if _CALLED_BY_FORMER_NAME.get() and self._push.former is not None:
            self._by_former_name.add(peer)
        else:
            self._by_former_name.discard(peer)
        return self.seq

    def unsubscribe(self, peer: RpcPeer) -> None:
        """Remove ``peer``."""
        self._subscribers.discard(peer)
        self._by_former_name.discard(peer)

    def publish(self, make_event: Callable[[int], E]) -> None:
        """Number the next event and push it to every subscriber."""
        self.seq += 1
        self._listeners.notify()
        if not self._subscribers:
            return
        event = make_event(self.seq)
        former = self._by_former_name
        for peer in list(self._subscribers):
            name = self._push.name if peer not in former else self._push.former
            peer.notify(name or self._push.name, event)
