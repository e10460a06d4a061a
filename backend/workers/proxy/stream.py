"""After the commit: the engine's response streams to the client chunk by chunk, never retried.

A client that leaves a chunk unread for the write deadline is cut (a half-open "zombie"); a
stream that ends without the engine's final marker reads Failed, not Completed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import msgspec
from aiohttp import web

from backend.workers.proxy.attempt import FAILURE_BODY_LIMIT, Commit
from backend.workers.proxy.forward import (
    PROXY_MS_HEADER,
    STARTED_KEY,
    cors_headers,
    elapsed_ms,
    format_ms,
    response_headers,
)
from backend.workers.proxy.jobs import Job
from backend.workers.proxy.markers import EndMarker
from backend.workers.proxy.wire import dialect_for, error_body


async def stream_commit(
    request: web.Request,
    commit: Commit,
    job: Job,
    *,
    write_deadline_s: float,
    on_output: Callable[[], None],
) -> web.StreamResponse:
    """Answer the client with the committed response; ``on_output`` once a 2xx one starts."""
    upstream = commit.upstream
    try:
        success = 200 <= upstream.status < 300
        if not success and dialect_for(job.path) == "openai":
            reshaped = await _openai_error(upstream, commit.first)
            if reshaped is not None:
                job.failed(f"the engine answered {upstream.status}")
                return reshaped
        if success:
            on_output()
        response = _prepared_headers(request, upstream)
        await response.prepare(request)
        marker = EndMarker(upstream.headers.get("Content-Type", ""))
        if not await _relay_body(request, response, commit, job, marker, write_deadline_s):
            return response
        await response.write_eof()
        if not success:
            job.failed(f"the engine answered {upstream.status} {upstream.reason or ''}".strip())
        elif marker.complete():
            job.completed()
        else:
            job.failed("the stream ended without the engine's final marker")
        return response
    finally:
        upstream.close()


def _prepared_headers(request: web.Request, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    response.headers.extend(response_headers(upstream))
    response.headers.extend(cors_headers(request))
    if upstream.content_length is not None:
        response.content_length = upstream.content_length
    response.headers[PROXY_MS_HEADER] = format_ms(elapsed_ms(request[STARTED_KEY]))
    return response


async def _relay_body(
    request: web.Request,
    response: web.StreamResponse,
    commit: Commit,
    job: Job,
    marker: EndMarker,
    write_deadline_s: float,
) -> bool:
    """Copy the body; False when it was cut (the job already says why)."""
    chunk = commit.first
    try:
        while chunk:
            marker.feed(chunk)
            await _write(response, chunk, write_deadline_s)
            chunk = await commit.upstream.content.readany()
    except TimeoutError:
        job.cancelled("the client stopped reading")
        _abort(request)
        return False
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, OSError) as exc:
        if isinstance(exc, ConnectionResetError) and _client_gone(request):
            raise
        job.failed(f"the engine's response broke off: {exc or type(exc).__name__}")
        _abort(request)
        return False
    return True


async def _openai_error(upstream: aiohttp.ClientResponse, first: bytes) -> web.Response | None:
    """A small JSON error answer, read whole and put in OpenAI's shape; None to stream it."""
    if (
        "json" not in upstream.headers.get("Content-Type", "")
        or (upstream.content_length or FAILURE_BODY_LIMIT + 1) > FAILURE_BODY_LIMIT
    ):
        return None
    body = first + await upstream.content.read()
    return web.Response(
        status=upstream.status,
        body=openai_error_body(body, upstream.status),
        content_type="application/json",
    )


def openai_error_body(body: bytes, status: int) -> bytes:
    """An engine's flat ``{"error": "text"}`` (LM Studio does this) as an OpenAI error object.

    Anything else (already an object, not JSON) is returned unchanged.
    """
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return body
    if not isinstance(decoded, dict) or not isinstance(decoded.get("error"), str):
        return body
    kind = "not_found_error" if status == 404 else "invalid_request_error"
    if status >= 500:
        kind = "server_error"
    return msgspec.json.encode(error_body("openai", decoded["error"], kind=kind, code=None))


async def _write(response: web.StreamResponse, chunk: bytes, deadline: float) -> None:
    async with asyncio.timeout(deadline):
        await response.write(chunk)


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _abort(request: web.Request) -> None:
    """Cut the client's connection so it sees an incomplete response, not a clean end."""
    transport = request.transport
    if transport is not None:
        transport.abort()
