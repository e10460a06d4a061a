"""Bad HTTP requests from the network: one short line each, rate-limited, never the payload.

aiohttp logs a request it cannot parse at ERROR with a traceback, and the exception's message
quotes the offending bytes, so anyone who reaches a listener could flood the rotating log with
junk of their choosing (a body it cannot decode is logged the same way, through the handler
that read it). PAIR's listeners hand their runner a ``BadRequestLog`` as aiohttp's
server ``logger``: a request aiohttp could not parse becomes one WARNING line naming the peer
and the kind of error, at most one a peer per ``PEER_INTERVAL_S`` and ``LINES_PER_MINUTE`` in
all, and everything else aiohttp logs (a handler that crashed) goes on unchanged, traceback
included.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from aiohttp import http_exceptions as bad
from aiohttp.log import server_logger
from aiohttp.web_protocol import RequestPayloadError

PEER_INTERVAL_S = 10.0
LINES_PER_MINUTE = 20
# Peers remembered for their interval; past this the oldest are forgotten (IPv6 sources are
# cheap to vary, so the global cap is what bounds the log then).
MAX_PEERS = 1024

# What went wrong, in words that quote nothing the peer sent (most specific class first).
_REASONS: tuple[tuple[type[bad.HttpProcessingError], str], ...] = (
    (bad.BadHttpMethod, "invalid HTTP method"),
    (bad.LineTooLong, "line too long"),
    (bad.InvalidHeader, "invalid header"),
    (bad.InvalidURLError, "invalid URL"),
    (bad.BadStatusLine, "invalid request line"),
    (bad.PayloadEncodingError, "invalid body"),
)


def is_bad_request(exc: object) -> bool:
    """Whether ``exc`` says the peer sent something that is not HTTP: a request aiohttp could
    not parse, or a body it could not decode (which a handler sees as ``RequestPayloadError``)."""
    return isinstance(exc, bad.HttpProcessingError | RequestPayloadError)


def describe(exc: BaseException) -> str:
    """``BadHttpMethod (invalid HTTP method)``: the error's kind, without its message."""
    if isinstance(exc, RequestPayloadError) and exc.__cause__ is not None:
        exc = exc.__cause__
    reason = next((text for kind, text in _REASONS if isinstance(exc, kind)), None)
    if reason is None:
        reason = "invalid body" if isinstance(exc, RequestPayloadError) else "malformed request"
    return f"{type(exc).__name__} ({reason})"


def peer_name(remote: object) -> str:
    """The peer's IP address as text, or ``an unknown address`` for anything else."""
    try:
        return str(ipaddress.ip_address(str(remote)))
    except ValueError:
        return "an unknown address"


class BadRequestLimiter:
    """Which bad-request lines get written: one a peer per ``per_peer_s``, ``per_minute`` in
    all (a fixed one-minute window); the rest are counted for the next line written."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        per_peer_s: float = PEER_INTERVAL_S,
        per_minute: int = LINES_PER_MINUTE,
        max_peers: int = MAX_PEERS,
    ) -> None:
        self._clock = clock
        self._per_peer_s = per_peer_s
        self._per_minute = per_minute
        self._max_peers = max_peers
        self._last_line: dict[str, float] = {}  # oldest first
        self._window_start = float("-inf")
        self._window_lines = 0
        self._suppressed = 0

    def admit(self, peer: str) -> int | None:
        """``None`` to drop this line, else how many were dropped since the last one written."""
        now = self._clock()
        self._forget(now)
        if now - self._window_start >= 60.0:
            self._window_start, self._window_lines = now, 0
        last = self._last_line.get(peer)
        if self._window_lines >= self._per_minute or (
            last is not None and now - last < self._per_peer_s
        ):
            self._suppressed += 1
            return None
        self._last_line.pop(peer, None)
        self._last_line[peer] = now
        self._window_lines += 1
        suppressed, self._suppressed = self._suppressed, 0
        return suppressed

    def _forget(self, now: float) -> None:
        while self._last_line:
            peer, last = next(iter(self._last_line.items()))
            if now - last < self._per_peer_s and len(self._last_line) < self._max_peers:
                return
            del self._last_line[peer]


class BadRequestLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server logger for one of PAIR's listeners (pass it as the runner's ``logger``).

    A record whose ``exc_info`` is a bad request (``is_bad_request``) becomes ``<listener>: bad
    request from <peer>: <kind>`` on ``into``, if the limiter admits it; every other record goes
    to aiohttp's own server logger as it was.
    """

    def __init__(
        self,
        listener: str,
        into: logging.Logger,
        *,
        limiter: BadRequestLimiter | None = None,
        logger: logging.Logger = server_logger,
    ) -> None:
        super().__init__(logger)
        self._listener = listener
        self._into = into
        self._limiter = limiter or BadRequestLimiter()
        # A body error reaches the log twice: from the handler that read it, then from aiohttp
        # draining the rest of the body (the same exception object, without the peer).
        self._noted: weakref.WeakSet[BaseException] = weakref.WeakSet()

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        """Shorten and limit a parse error; pass anything else to aiohttp's logger."""
        exc = kwargs.get("exc_info")
        if isinstance(exc, BaseException) and is_bad_request(exc):
            # aiohttp's ``handle_error`` logs ("Error handling request from %s", remote).
            self.bad_request(args[0] if args else None, exc)
            return
        super().log(level, msg, *args, **kwargs)

    def bad_request(self, remote: object, exc: BaseException) -> None:
        """Write the one short line for a bad request from ``remote``, if the limiter admits it."""
        if exc in self._noted:
            return
        with contextlib.suppress(TypeError):  # a class without weak references: noted again
            self._noted.add(exc)
        peer = peer_name(remote)
        suppressed = self._limiter.admit(peer)
        if suppressed is None:
            return
        more = f" ({suppressed} more bad requests not logged)" if suppressed else ""
        self._into.warning(
            "%s: bad request from %s: %s%s", self._listener, peer, describe(exc), more
        )
