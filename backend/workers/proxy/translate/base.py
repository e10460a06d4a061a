"""What every translation between a client API and the engine's OpenAI API has in common."""

from __future__ import annotations

from typing import Protocol

import msgspec

from backend.workers.proxy.doors.wire import Dialect as Dialect


class Unhonoured(ValueError):
    """A request field the target engine cannot honour: answered 400, naming the field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class LoadRequest(Exception):
    """Ollama's request to load (or, with ``keep_alive`` 0, unload) a model: empty messages or
    prompt. An engine PAIR translates for has no such request (it holds its model while it
    runs), so the door answers it as Ollama does, with ``body``."""

    def __init__(self, body: bytes) -> None:
        super().__init__("a load request")
        self.body = body


class Malformed(ValueError):
    """The client's request is not valid in its own API (answered 400 with this message)."""


class ReplyTranslator(Protocol):
    """Turns the engine's OpenAI answer to one request into the client API's answer.

    ``chunk`` takes the engine's stream bytes as they arrive, split anywhere, and returns the
    client's bytes for the whole records they complete (often ``b""``); the client's final
    record (Ollama's ``"done": true`` line, Anthropic's ``message_stop``) comes only from the
    engine's own end (``data: [DONE]``), never from a cut. ``whole`` turns a non-streamed 2xx
    body. ``error_record`` is the last record of a cut stream, in the client's framing.
    """

    stream_content_type: str

    def chunk(self, data: bytes) -> bytes: ...

    def whole(self, body: bytes) -> bytes: ...

    def error_record(self, message: str) -> bytes: ...


class EngineRequest(msgspec.Struct, frozen=True):
    """The request as the engine gets it: an OpenAI path and JSON body; ``stream`` is whether
    the client asked for a stream; ``ignored`` names the load-time settings the client sent
    that the engine sets its own way (reported in a response header, never silently)."""

    path: str
    body: bytes
    stream: bool
    ignored: tuple[str, ...] = ()


class Translation(msgspec.Struct, frozen=True):
    """A translated request and the translator of its answer."""

    request: EngineRequest
    reply: ReplyTranslator
