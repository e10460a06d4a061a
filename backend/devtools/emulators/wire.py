"""Byte-level wire helpers shared by the emulators: JSON encoders, timestamps, streaming writers."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final

from aiohttp import web

JSON_UTF8: Final = "application/json; charset=utf-8"
NANOSECONDS: Final = 1_000_000_000
# Go's time.Now().Add(math.MaxInt64): what Ollama shows for keep_alive < 0 (about 292 years).
FOREVER_NS: Final = 2**63 - 1

# Go's encoding/json escapes these even with UTF-8 output (HTML safety), Ollama inherits that.
_GO_ESCAPES: Final = (
    ("&", "\\u0026"),
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


def go_json(value: Any) -> str:
    """JSON as Go's ``json.Marshal`` writes it: compact, UTF-8, HTML characters escaped."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for raw, escaped in _GO_ESCAPES:
        text = text.replace(raw, escaped)
    return text


def js_json(value: Any) -> str:
    """JSON as JavaScript's ``JSON.stringify`` writes it (LM Studio is a Node server)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def rfc3339_nano(unix_ns: int, *, utc: bool) -> str:
    """Go's ``time.RFC3339Nano``: trailing fraction zeros trimmed, ``Z`` for a zero offset."""
    seconds, fraction = divmod(unix_ns, NANOSECONDS)
    offset = 0 if utc else _local_offset(seconds)
    zone = UTC if offset == 0 else timezone(timedelta(seconds=offset))
    moment = datetime.fromtimestamp(seconds, tz=zone)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{fraction:09d}".rstrip("0")
    if digits:
        text += "." + digits
    return text + _zone_suffix(offset)


def iso_millis(unix_seconds: float) -> str:
    """JavaScript's ``Date.toISOString()``: UTC with milliseconds."""
    moment = datetime.fromtimestamp(unix_seconds, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def far_future_ns(now_ns: int, duration_ns: int) -> int:
    """``now + duration`` saturating like Go's ``time.Add`` (it never wraps)."""
    return now_ns + min(duration_ns, FOREVER_NS)


def _local_offset(unix_seconds: int) -> int:
    try:
        return time.localtime(unix_seconds).tm_gmtoff
    except (OverflowError, OSError):
        return time.localtime().tm_gmtoff


def _zone_suffix(offset: int) -> str:
    if offset == 0:
        return "Z"
    sign = "+" if offset > 0 else "-"
    hours, rest = divmod(abs(offset), 3600)
    return f"{sign}{hours:02d}:{rest // 60:02d}"


def json_response(body: str, *, status: int = 200, content_type: str = JSON_UTF8) -> web.Response:
    """A complete JSON response with exactly the given Content-Type header."""
    response = web.Response(status=status, body=body.encode())
    response.headers["Content-Type"] = content_type
    return response


class LineStream:
    """A streamed body written piece by piece; headers go out with the first piece.

    Engines send their headers only when the first object is ready, so an error before that
    still gets a real status; that is why ``prepare`` is deferred.
    """

    def __init__(self, request: web.Request, content_type: str) -> None:
        self._request = request
        self._response = web.StreamResponse(status=200)
        self._response.headers["Content-Type"] = content_type
        self.started = False

    @property
    def response(self) -> web.StreamResponse:
        """The underlying aiohttp response."""
        return self._response

    def set_header(self, name: str, value: str) -> None:
        """Add a header before the first write."""
        self._response.headers[name] = value

    async def write_text(self, text: str) -> None:
        """Send ``text`` now (as one HTTP chunk)."""
        if not self.started:
            self._response.enable_chunked_encoding()
            await self._response.prepare(self._request)
            self.started = True
        await self._response.write(text.encode())

    async def finish(self) -> web.StreamResponse:
        """End the body and hand the response back to aiohttp."""
        if not self.started:
            await self.write_text("")
        await self._response.write_eof()
        return self._response


class NdjsonStream(LineStream):
    """Ollama's NDJSON: ``json.Marshal(obj) + "\\n"`` per object, no blank lines."""

    def __init__(self, request: web.Request) -> None:
        super().__init__(request, "application/x-ndjson")

    async def send(self, value: Any) -> None:
        """Write one object as one line."""
        await self.write_text(go_json(value) + "\n")


class SseStream(LineStream):
    """OpenAI-style server-sent events: ``data: <json>\\n\\n`` and a final ``data: [DONE]``."""

    def __init__(self, request: web.Request, encode: Any = js_json) -> None:
        super().__init__(request, "text/event-stream")
        self._encode = encode

    async def send(self, value: Any) -> None:
        """Write one ``data:`` event."""
        await self.write_text(f"data: {self._encode(value)}\n\n")

    async def send_done(self) -> None:
        """Write the terminal ``[DONE]`` event."""
        await self.write_text("data: [DONE]\n\n")
