"""Answers the proxy makes itself, in the shape the caller's API uses for errors."""

from __future__ import annotations

import msgspec
from aiohttp import web

from backend.workers.proxy.doors.wire import dialect_for, error_body


class ErrorReply(msgspec.Struct, frozen=True):
    """A status, a message and an error type; shaped per API when answered."""

    status: int
    message: str
    kind: str
    code: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)

    def response(self, path: str) -> web.Response:
        """The answer to a request for ``path`` (``/api/*``: Ollama's shape, else OpenAI's)."""
        body = error_body(dialect_for(path), self.message, kind=self.kind, code=self.code)
        return web.json_response(body, status=self.status, headers=self.headers)
