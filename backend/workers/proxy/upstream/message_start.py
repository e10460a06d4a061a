"""An Anthropic event stream that begins without its ``message_start``: the event put back.

llama-server writes ``message_start`` only into the partial result of its first token
(``n_decoded == 1``). A first token that is not a whole UTF-8 character (a byte token: the
first bytes of an emoji or a CJK character, or any token of a small random model) gets no
partial result of its own, so the stream begins at ``content_block_start``; Anthropic's
clients then fail the whole answer (the official SDK's ``get_final_message``: no
``message_start``). A passed-through stream is checked once, at its first chunk (the commit):
if it opens with an event that must come after ``message_start``, one is put before it, with
the requested model and no usage counted (the engine's own is lost with the event it never
wrote). The rest of the stream is not looked at, so the relay's per-chunk path is unchanged.
"""

from __future__ import annotations

import re
import time

from backend.workers.proxy.translate.anthropic_stream import event, message_id

# The events an Anthropic stream may carry only after its ``message_start`` (``ping`` and
# ``error`` may come first).
_AFTER_START = re.compile(
    rb"\s*event:[ \t]*"
    rb"(?:content_block_start|content_block_delta|content_block_stop|message_delta|message_stop)"
    rb"[ \t]*\r?\n"
)


def with_message_start(first: bytes, path: str, content_type: str, model: str) -> bytes:
    """``first`` (a 2xx answer's first chunk) with a ``message_start`` put before it when it
    lacks one (``lacks_message_start``); ``first`` itself otherwise."""
    if lacks_message_start(path, content_type, first):
        return message_start(model) + first
    return first


def lacks_message_start(path: str, content_type: str, first: bytes) -> bool:
    """Whether a 2xx answer to ``path`` is an Anthropic event stream whose first chunk,
    ``first``, opens past the ``message_start`` it must begin with."""
    return (
        path.startswith("/v1/messages")
        and "event-stream" in content_type.lower()
        and _AFTER_START.match(first) is not None
    )


def message_start(model: str) -> bytes:
    """A ``message_start`` event for an answer from ``model``, its usage not known."""
    message: dict[str, object] = {
        "id": message_id(None, time.time_ns),
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    return event("message_start", {"message": message})
