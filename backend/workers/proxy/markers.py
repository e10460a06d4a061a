"""Did a response end the way the engine ends a complete one?

A stream cut short (the engine crashed, the connection broke cleanly) must read Failed, not
Completed. Each streaming format has a final marker: Ollama's NDJSON ends with a ``"done": true``
line, OpenAI SSE with ``data: [DONE]``, llama-server's native SSE with ``"stop": true``, and
Anthropic's with ``message_stop``. Only the last bytes are kept, never the whole stream.
"""

from __future__ import annotations

import re

TAIL_BYTES = 1024
_DONE_LINE = re.compile(rb'"done"\s*:\s*true')
_SSE_END = re.compile(rb'data:\s*\[DONE\]|"stop"\s*:\s*true|message_stop')


class EndMarker:
    """Watches a response's tail for its format's final marker."""

    def __init__(self, content_type: str) -> None:
        content_type = content_type.lower()
        self._kind = (
            "ndjson"
            if "ndjson" in content_type
            else "sse"
            if "event-stream" in content_type
            else "whole"
        )
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        """Account for the next chunk of the body."""
        if self._kind != "whole" and chunk:
            self._tail = (self._tail + chunk)[-TAIL_BYTES:]

    def complete(self) -> bool:
        """Whether the body seen so far ends like a complete response."""
        if self._kind == "whole":
            return True
        if self._kind == "sse":
            return _SSE_END.search(self._tail) is not None
        lines = [line for line in self._tail.split(b"\n") if line.strip()]
        return bool(lines) and _DONE_LINE.search(lines[-1]) is not None
