"""Did a response end the way the engine ends a complete one?

A stream cut short (the engine crashed, the connection broke cleanly) must read Failed, not
Completed. Each streaming format marks its last record: Ollama's NDJSON with a ``"done": true``
line, OpenAI SSE with ``data: [DONE]``, llama-server's native SSE with ``"stop": true``, and
Anthropic's with a ``message_stop`` event. Only the last line is kept (bounded), and it is
parsed once, at the end; text inside earlier records can never look like the marker.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec

LINE_CAP = 256 * 1024
_DONE_TEXT = re.compile(rb'"done"\s*:\s*true')
_STOP_TEXT = re.compile(rb'"stop"\s*:\s*true|"type"\s*:\s*"message_stop"')
_NEVER = re.compile(rb"(?!)")


class EndMarker:
    """Watches a response's last line for its format's final marker."""

    def __init__(self, content_type: str) -> None:
        content_type = content_type.lower()
        self._kind = (
            "ndjson"
            if "ndjson" in content_type
            else "sse"
            if "event-stream" in content_type
            else "whole"
        )
        self._current = bytearray()
        self._last = b""
        # The last chunk fed whole lines (the common case: a record a chunk), its last line not
        # yet taken out: ``_settle`` does that when the line is asked for or more text comes.
        self._whole: bytes | None = None

    def feed(self, chunk: bytes) -> None:
        """Account for the next chunk of the body."""
        if self._kind == "whole" or not chunk:
            return
        if not self._current and chunk[-1] == 10:  # whole lines, nothing cut before them
            if self._whole is None or not chunk.isspace():
                self._whole = chunk  # a blank chunk leaves the last line where it was
            return
        self._settle()
        self._lines(chunk)

    def _settle(self) -> None:
        whole = self._whole
        if whole is not None:
            self._whole = None
            self._lines(whole)

    def _lines(self, chunk: bytes) -> None:
        end = chunk.rfind(b"\n")
        if end < 0:
            self._append(chunk)
            return
        completed = chunk[:end]
        if self._current:
            completed = bytes(self._current) + completed
            self._current = bytearray()
        completed = completed.rstrip()
        if completed:  # its last line is the last one that is not blank
            self._last = completed[completed.rfind(b"\n") + 1 :][:LINE_CAP]
        if end + 1 < len(chunk):
            self._append(chunk[end + 1 :])

    def ended_by(self, chunk: bytes) -> bool:
        """Whether the body fed so far, ``chunk`` last, ends complete (checked only when the
        chunk holds its format's marker text, so a chunk without one costs one search). A
        whole body's end is known only from its length, not from here: False."""
        if self._kind == "ndjson":
            hinted = _DONE_TEXT.search(chunk) is not None
        elif self._kind == "sse":
            hinted = b"[DONE]" in chunk or _STOP_TEXT.search(chunk) is not None
        else:
            return False
        return hinted and self.complete()

    @property
    def streaming(self) -> bool:
        """Whether the body is a stream of records (NDJSON, SSE): an error can go in band."""
        return self._kind != "whole"

    @property
    def event_stream(self) -> bool:
        """Whether the body is server-sent events."""
        return self._kind == "sse"

    @property
    def mid_line(self) -> bool:
        """Whether the body seen so far stops inside a line."""
        return bool(self._current)

    def ended_in_error(self) -> bool:
        """Whether the last record is already an error (a peer's own in-band one, say)."""
        line = self._final_line()
        if self._kind == "sse":
            if not line.startswith(b"data:"):
                return False
            line = line[5:].strip()
        return _field(
            line, _NEVER, lambda record: "error" in record or record.get("type") == "error"
        )

    def complete(self) -> bool:
        """Whether the body seen so far ends like a complete response."""
        if self._kind == "whole":
            return True
        line = self._final_line()
        if self._kind == "ndjson":
            return _field(line, _DONE_TEXT, lambda record: record.get("done") is True)
        if not line.startswith(b"data:"):
            return False
        data = line[5:].strip()
        if data == b"[DONE]":
            return True
        return _field(
            data,
            _STOP_TEXT,
            lambda record: record.get("stop") is True or record.get("type") == "message_stop",
        )

    def _final_line(self) -> bytes:
        self._settle()
        line = bytes(self._current) if self._current.strip() else self._last
        return line.strip()

    def _append(self, data: bytes) -> None:
        room = LINE_CAP - len(self._current)
        if room > 0:
            self._current += data[:room]


def _field(
    line: bytes, fallback: re.Pattern[bytes], check: Callable[[dict[str, Any]], bool]
) -> bool:
    """Parse the line as a JSON object and ``check`` it; a line cut at the cap is searched."""
    if len(line) >= LINE_CAP:
        return fallback.search(line) is not None
    try:
        record = msgspec.json.decode(line)
    except msgspec.DecodeError:
        return False
    return isinstance(record, dict) and check(record)
