"""An engine's error answer to an OpenAI client, put in OpenAI's error shape.

LM Studio (and others) answer a failed request with a flat ``{"error": "text"}``; OpenAI's
clients read ``error.message``, so a small JSON error body is read whole and reshaped before it
goes out (``stream.py``, and the last failure's answer, ``routing/replies.py``).
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from backend.workers.proxy.doors.wire import error_body
from backend.workers.proxy.upstream.answer import Upstream
from backend.workers.proxy.upstream.attempt import FAILURE_BODY_LIMIT


async def openai_error(upstream: Upstream, first: bytes) -> web.Response | None:
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
