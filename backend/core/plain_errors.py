"""Network failures as sentences a user can read and act on.

aiohttp's and the socket layer's own texts name Python objects (``ssl:<ssl.SSLContext object at
0x…>``, ``ssl:default`` on a plain-HTTP URL), errno numbers and tuples; a user needs to know
which of a few things happened: the name did not resolve (a typo), nothing listens on the port,
the port does not speak TLS, the certificate is refused, or no answer came in time.
"""

from __future__ import annotations

import re
import socket
import ssl

import aiohttp
from yarl import URL

# Texts that are Python's view of an object rather than an explanation.
_INTERNAL_TEXT = re.compile(r"object at 0x|ssl:|\bb'|\bb\"|\[Errno|Errno -?\d|<\w")
# OpenSSL's reasons when the other side answered something other than a TLS handshake.
_NOT_TLS_REASONS = frozenset(
    {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "HTTP_REQUEST", "PACKET_LENGTH_TOO_LONG"}
)


def plain_error(exc: BaseException, where: str) -> str:
    """What went wrong reaching ``where`` (an address or URL), in plain words."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return _connect_failure(exc.os_error, where, exc.host)
    if isinstance(exc, TimeoutError):
        return f"{where} did not answer in time"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return f"{where} closed the connection without answering"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return f"the answer from {where} was cut off"
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"{where} answered HTTP {exc.status} {exc.message}".rstrip()
    if isinstance(exc, aiohttp.InvalidURL):
        return f"{exc.url} is not a URL this computer can fetch"
    if isinstance(exc, OSError):
        return _connect_failure(exc, where, _host_of(where))
    return _readable(str(exc), f"the connection to {where} failed")


def _connect_failure(error: OSError, where: str, host: str) -> str:
    if isinstance(error, socket.gaierror):
        return f"the name {host} did not resolve (check its spelling, or use an IP address)"
    if isinstance(error, ssl.SSLCertVerificationError):
        reason = error.verify_message or "it is not trusted"
        return f"{where} presented a certificate this computer refuses: {reason}"
    if isinstance(error, ssl.SSLError):
        if error.reason in _NOT_TLS_REASONS:
            return f"{where} does not speak TLS (is it a plain HTTP port?)"
        reason = (error.reason or "").replace("_", " ").lower()
        return f"the TLS handshake with {where} failed: {reason}".removesuffix(": ")
    if isinstance(error, ConnectionRefusedError):
        return f"cannot connect to {where}: connection refused (nothing listens there)"
    if isinstance(error, ConnectionResetError):
        return f"{where} reset the connection"
    if isinstance(error, TimeoutError):
        return f"{where} did not answer in time"
    if error.strerror:
        return f"cannot connect to {where}: {error.strerror[0].lower()}{error.strerror[1:]}"
    return f"cannot connect to {where}"


def _readable(text: str, fallback: str) -> str:
    """``text`` when it is a sentence; ``fallback`` when it shows Python's internals."""
    return fallback if not text or _INTERNAL_TEXT.search(text) else text


def _host_of(where: str) -> str:
    """The host name in ``where``: a URL's, or an ``address:port``'s."""
    if "://" in where:
        try:
            return URL(where).host or where
        except ValueError:
            return where
    host, _, port = where.rpartition(":")
    return host.strip("[]") if host and port.isdigit() else where
