"""The keys of this computer's engines that PAIR launched with one (llama-server's
``LLAMA_API_KEY``), sent to them as ``Authorization: Bearer <key>`` by both clients.

The routing table carries each local engine's key (``RouteTarget.api_key``); this keeps them by
the engine's origin (host, port), worked out once per table, so a request adds the header
without any work of its own: the lean client keeps it with the origin's connection pool, and
aiohttp's client (model lists, slots, details, pass-through) looks the origin up in a dict that
is empty unless such an engine runs. The client's own ``Authorization`` never reaches such an
engine: PAIR's replaces it. No key goes to a peer or to an engine added by address.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import aiohttp
from yarl import URL

from backend.protocol.proxy import ProxyTargets

Origin = tuple[str, int]


class EngineKeys:
    """The ``Authorization`` value of each keyed local engine, by origin."""

    def __init__(self) -> None:
        self._by_origin: dict[Origin, str] = {}
        self._listeners: list[Callable[[Mapping[Origin, str]], None]] = []

    def follow(self, targets: ProxyTargets) -> None:
        """Adopt the keys of a new routing table (its local targets only)."""
        found: dict[Origin, str] = {}
        for listed in targets.engines.values():
            for target in listed:
                if target.kind == "local" and target.api_key:
                    found[origin_of(URL(target.base_url))] = f"Bearer {target.api_key}"
        if found != self._by_origin:
            self._by_origin = found
            for listener in self._listeners:
                listener(found)

    def on_change(self, listener: Callable[[Mapping[Origin, str]], None]) -> None:
        """Call ``listener`` with every new set of keys (the lean client's pools)."""
        self._listeners.append(listener)

    def current(self) -> Mapping[Origin, str]:
        """The ``Authorization`` value of each origin that needs one, now."""
        return self._by_origin

    async def middleware(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        """aiohttp's client middleware: the key of the engine a request goes to, if any."""
        if self._by_origin:
            value = self._by_origin.get(origin_of(request.url))
            if value is not None:
                request.headers["Authorization"] = value
        return await handler(request)


def origin_of(url: URL) -> Origin:
    """``(host, port)`` as the clients connect to it."""
    return url.raw_host or "", url.port or 80
