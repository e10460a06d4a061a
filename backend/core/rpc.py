"""Serving JSON-RPC: method routing with typed params, the set of connected clients, pushes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from backend.protocol import errors
from backend.protocol.peer import RpcPeer

log = logging.getLogger(__name__)
P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class _Route:
    handler: Callable[[Any, RpcPeer], Awaitable[Any]]
    params: type[Any] | None


class Dispatcher:
    """Maps method names to handlers; converts params to the handler's type or answers -32602."""

    def __init__(self) -> None:
        self._routes: dict[str, _Route] = {}

    def add(
        self, method: str, handler: Callable[[P, RpcPeer], Awaitable[Any]], params: type[P]
    ) -> None:
        """Route ``method`` to ``handler(params, peer)`` with params converted to ``params``."""
        self._add(method, _Route(handler, params))

    def add_plain(self, method: str, handler: Callable[[RpcPeer], Awaitable[Any]]) -> None:
        """Route a method that takes no params."""

        async def call(_: Any, peer: RpcPeer) -> Any:
            return await handler(peer)

        self._add(method, _Route(call, None))

    def methods(self) -> list[str]:
        """Every routed method name."""
        return sorted(self._routes)

    async def __call__(self, method: str, params: Any, peer: RpcPeer) -> Any:
        """Handle one request (the ``on_request`` hook of an ``RpcPeer``)."""
        route = self._routes.get(method)
        if route is None:
            raise errors.MethodNotFound(f"Method not found: {method}")
        return await route.handler(_convert(method, params, route.params), peer)

    def _add(self, method: str, route: _Route) -> None:
        if method in self._routes:
            raise ValueError(f"method {method!r} is already routed")
        self._routes[method] = route


def _convert(method: str, params: Any, target: type[Any] | None) -> Any:
    if target is None:
        return None
    if isinstance(params, list):
        raise errors.InvalidParams(f"Invalid params for {method}: params must be an object")
    try:
        return msgspec.convert(params if params is not None else {}, target)
    except msgspec.ValidationError as exc:
        raise errors.InvalidParams(f"Invalid params for {method}: {exc}") from None


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

    def broadcast(self, method: str, params: Any) -> None:
        """Push a notification to every client."""
        for peer in list(self._clients):
            peer.notify(method, params)

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


class NumberedStream:
    """Events with a monotonic ``seq`` delivered to subscribed clients after their snapshot."""

    def __init__(self, push_method: str, hub: ClientHub) -> None:
        self._push_method = push_method
        self._subscribers: set[RpcPeer] = set()
        self.seq = 0
        hub.on_leave(self._subscribers.discard)

    def subscribe(self, peer: RpcPeer) -> int:
        """Add ``peer``; returns the ``seq`` its snapshot corresponds to."""
        self._subscribers.add(peer)
        return self.seq

    def unsubscribe(self, peer: RpcPeer) -> None:
        """Remove ``peer``."""
        self._subscribers.discard(peer)

    def publish(self, make_event: Callable[[int], Any]) -> None:
        """Number the next event and push it to every subscriber."""
        self.seq += 1
        if not self._subscribers:
            return
        event = make_event(self.seq)
        for peer in list(self._subscribers):
            peer.notify(self._push_method, event)
