"""A request head as httptools reports it, made into aiohttp's ``RawRequestMessage``; pure.

The limits are aiohttp's own server defaults, so a client that aiohttp's protocol refused is
refused the same way, with the same kind of error (``backend/core/bad_requests.py`` words it).
"""

from __future__ import annotations

from aiohttp import hdrs
from aiohttp import http_exceptions as bad
from aiohttp.http import HttpVersion, HttpVersion10, HttpVersion11, RawRequestMessage
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

MAX_LINE = 8190  # the request line's target
MAX_FIELD = 8190  # one header's name or value
MAX_HEADERS = 128
# The decodings aiohttp applies to a request body (``Content-Encoding``).
DECODED = frozenset({"gzip", "deflate", "br", "zstd"})

_VERSIONS = {"1.1": HttpVersion11, "1.0": HttpVersion10}


class Head:
    """The parts of one request head as they arrive (``on_url`` may come in pieces)."""

    __slots__ = ("headers", "raw_headers", "target")

    def __init__(self) -> None:
        self.target = b""
        self.headers: list[tuple[str, str]] = []
        self.raw_headers: list[tuple[bytes, bytes]] = []

    def add_target(self, part: bytes) -> None:
        """More of the request target; too long a one is ``LineTooLong``."""
        target = self.target + part
        if len(target) > MAX_LINE:
            raise bad.LineTooLong("request line", str(MAX_LINE), str(len(target)))
        self.target = target

    def add_header(self, name: bytes, value: bytes) -> None:
        """One header; too long a one is ``LineTooLong``, too many ``BadHttpMessage``."""
        if len(name) > MAX_FIELD or len(value) > MAX_FIELD:
            raise bad.LineTooLong("request header", str(MAX_FIELD), str(len(name) + len(value)))
        if len(self.headers) >= MAX_HEADERS:
            raise bad.BadHttpMessage("too many headers")
        self.raw_headers.append((name, value))
        self.headers.append(
            (name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))
        )

    def message(self, method: bytes, version: str, keep_alive: bool) -> RawRequestMessage:
        """The head as aiohttp's message (as its own parser makes it)."""
        headers = CIMultiDictProxy(CIMultiDict(self.headers))
        coding = headers.get(hdrs.CONTENT_ENCODING, "").lower()
        chunked = "chunked" in headers.get(hdrs.TRANSFER_ENCODING, "").lower()
        upgrade = hdrs.UPGRADE in headers and "upgrade" in headers.get(hdrs.CONNECTION, "").lower()
        path = self.target.decode("utf-8", "surrogateescape")
        return RawRequestMessage(
            method.decode("ascii"),
            path,
            _VERSIONS.get(version) or _version(version),
            headers,
            tuple(self.raw_headers),
            not keep_alive,
            coding if coding in DECODED else None,
            upgrade,
            chunked,
            _url(path),
        )


def has_body(message: RawRequestMessage) -> bool:
    """Whether a body follows the head (a length over 0, or chunks)."""
    if message.chunked:
        return True
    length = message.headers.get(hdrs.CONTENT_LENGTH)
    return length is not None and length.strip() not in ("", "0")


def _version(text: str) -> HttpVersion:
    major, _, minor = text.partition(".")
    try:
        return HttpVersion(int(major), int(minor))
    except ValueError:
        raise bad.BadStatusLine(f"HTTP/{text}") from None


def _url(target: str) -> URL:
    try:
        if target.startswith("/"):
            path, _, query = target.partition("?")
            query = query.partition("#")[0]
            return URL.build(path=path.partition("#")[0], query_string=query, encoded=True)
        return URL(target, encoded=True)
    except ValueError as exc:
        raise bad.InvalidURLError(target[:80]) from exc
