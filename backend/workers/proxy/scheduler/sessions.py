"""Which conversation a request belongs to, and pinning a request to one engine slot.

The session is what KV affinity and slot ownership are about (docs/SCHEDULER.md): the client's
own key when it sends one (the ``X-PAIR-Session`` header, else OpenAI's ``user`` field), and
otherwise a digest of the conversation's opening, so the next turn of the same chat (the same
first messages, one more exchange at the end) is recognised. A request with nothing to go on
has no session: it is keyless.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import msgspec

SESSION_HEADER = "X-PAIR-Session"
MAX_SESSION_CHARS = 200
# The part of a bare prompt that identifies its conversation (a chat sent as one prompt keeps
# its opening as the conversation grows).
PROMPT_PREFIX_CHARS = 512


class _Message(msgspec.Struct):
    role: str = ""
    # Kept as the client sent it: only the opening messages are hashed, and a conversation's
    # turns (images and all) need not become Python objects to tell which one it is.
    content: msgspec.Raw = msgspec.Raw(b"null")


class _Shape(msgspec.Struct):
    model: str = ""
    user: Any = None
    messages: list[_Message] | None = None
    prompt: Any = None
    system: Any = None


_decoder = msgspec.json.Decoder(_Shape)
_encoder = msgspec.json.Encoder()


def session_of(headers: Mapping[str, str], body: bytes) -> str | None:
    """The request's session: explicit (header, then ``user``), else derived, else None."""
    explicit = headers.get(SESSION_HEADER, "").strip()
    if explicit:
        return "k:" + explicit[:MAX_SESSION_CHARS]
    try:
        shape = _decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    if isinstance(shape.user, str) and shape.user.strip():
        return "u:" + shape.user.strip()[:MAX_SESSION_CHARS]
    opening = _opening(shape)
    if opening is None:
        return None
    digest = hashlib.sha256(_encoder.encode([shape.model, *opening])).hexdigest()
    return "c:" + digest[:24]


def _opening(shape: _Shape) -> list[Any] | None:
    """The messages that stay the same for the whole conversation: the system prompt and the
    first user message (for a bare prompt, its opening characters)."""
    if shape.messages:
        system = user = None
        for message in shape.messages:  # the first of each role, in one pass
            if message.role == "system" and system is None:
                system = message
            elif message.role == "user" and user is None:
                user = message
            if system is not None and user is not None:
                break
        opening: list[Any] = []
        if system is not None:
            opening.append(["system", bytes(system.content)])
        if user is not None:
            opening.append(["user", bytes(user.content)])
        return opening or None
    if isinstance(shape.prompt, str) and shape.prompt:
        instructions = shape.system if isinstance(shape.system, str) else ""
        return [instructions, shape.prompt[:PROMPT_PREFIX_CHARS]]
    return None


def pin_slot(body: bytes, field: str, slot: int) -> bytes:
    """``body`` (a JSON object) with ``field`` set to ``slot``; unchanged if it is not one."""
    try:
        document = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return body
    if not isinstance(document, dict):
        return body
    document[field] = slot
    return _encoder.encode(document)
