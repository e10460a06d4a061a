"""The parts of a translated answer that are not a stream: a whole body, an error, headers.

A whole (non-streamed) answer is read to its end (bounded), translated at once and answered
with its length; an engine's error keeps its status and is put in the client API's shape. A
stream's headers are the client API's (its content type; no length, the records change size).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from backend.workers.proxy.channels.jobs import Job
from backend.workers.proxy.doors.wire import dialect_for
from backend.workers.proxy.translate.base import Translation
from backend.workers.proxy.translate.errors import client_error
from backend.workers.proxy.upstream.answer import Upstream

# Names the client's settings that its engine sets its own way (never dropped silently).
IGNORED_HEADER = "X-PAIR-Ignored"
MAX_WHOLE_BYTES = 64 * 1024 * 1024
ERROR_BODY_LIMIT = 64 * 1024


def is_stream(upstream: Upstream, success: bool) -> bool:
    """Whether the engine answers with a stream of events (translated record by record)."""
    return success and "event-stream" in upstream.headers.get("Content-Type", "").lower()


def stream_headers(response: web.StreamResponse, translation: Translation) -> None:
    """Make a prepared-to-be stream's headers the client API's."""
    response.headers.popall("Content-Length", None)
    response.content_length = None
    response.headers["Content-Type"] = translation.reply.stream_content_type
    _name_ignored(response, translation)


async def translated_whole(
    upstream: Upstream,
    first: bytes,
    translation: Translation,
    job: Job,
    on_output: Callable[[], None],
) -> web.Response:
    """A whole answer, or an error, in the client's API (its job ended before it goes)."""
    success = 200 <= upstream.status < 300
    limit = MAX_WHOLE_BYTES if success else ERROR_BODY_LIMIT
    body = await _read_bounded(upstream, first, limit)
    if not success:
        job.failed(f"the engine answered {upstream.status} {upstream.reason or ''}".strip())
        reply = client_error(dialect_for(job.path), upstream.status, body)
        return web.Response(status=upstream.status, body=reply, content_type="application/json")
    try:
        reply = translation.reply.whole(body)
    except ValueError as exc:
        job.failed(f"the engine's answer could not be translated: {exc}")
        message = f"the engine's answer could not be translated: {exc}".encode()
        error = client_error(dialect_for(job.path), 502, message)
        return web.Response(status=502, body=error, content_type="application/json")
    on_output()
    job.completed()
    response = web.Response(status=200, body=reply, content_type="application/json")
    _name_ignored(response, translation)
    return response


def _name_ignored(response: web.StreamResponse, translation: Translation) -> None:
    if translation.request.ignored:
        response.headers[IGNORED_HEADER] = ", ".join(translation.request.ignored)


async def _read_bounded(upstream: Upstream, first: bytes, limit: int) -> bytes:
    """The body from ``first`` on, to its end or ``limit`` bytes (a longer one is cut)."""
    parts = [first]
    size = len(first)
    while first and size < limit:
        first = await upstream.content.readany()
        parts.append(first)
        size += len(first)
    return b"".join(parts)[:limit]
