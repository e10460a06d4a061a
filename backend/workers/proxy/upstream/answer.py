"""What the relay needs of an engine's answer, whichever client fetched it.

``aiohttp.ClientResponse`` (peers, over mutual TLS) and ``engine_client.EngineResponse``
(engines in plain HTTP) both are one.
"""

from __future__ import annotations

from typing import Protocol

from multidict import CIMultiDictProxy


class UpstreamBody(Protocol):
    """An answer's body, read as it comes."""

    async def readany(self) -> bytes:
        """What has come and is unread (waiting for some); ``b""`` at the end."""
        ...

    async def read(self, n: int = -1) -> bytes:
        """The rest (``n`` < 0), or at most ``n`` bytes once some came."""
        ...


class Upstream(Protocol):
    """An engine's answer once its head is in."""

    @property
    def status(self) -> int: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def headers(self) -> CIMultiDictProxy[str]: ...

    @property
    def content_length(self) -> int | None: ...

    @property
    def content(self) -> UpstreamBody: ...

    def close(self) -> None:
        """Drop it; a connection with its body still coming is closed."""
        ...
