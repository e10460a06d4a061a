"""Newline-delimited frame splitting without I/O (one JSON object per line)."""

from __future__ import annotations

import msgspec

MAX_FRAME_BYTES = 16 * 1024 * 1024


class OversizedFrame(msgspec.Struct, frozen=True):
    """A frame that exceeded the limit; its bytes were discarded up to the next newline."""

    size: int


Frame = bytes | OversizedFrame


class FrameSplitter:
    """Turns arbitrary chunks into frames; never buffers more than ``max_frame`` bytes."""

    def __init__(self, max_frame: int = MAX_FRAME_BYTES) -> None:
        self._max = max_frame
        self._buffer = bytearray()
        self._discarded: int | None = None

    def feed(self, data: bytes) -> list[Frame]:
        """Add bytes; return every frame completed by them, in order."""
        frames: list[Frame] = []
        position = 0
        while position < len(data):
            newline = data.find(b"\n", position)
            end = len(data) if newline < 0 else newline
            self._append(data, position, end)
            if newline < 0:
                break
            frames.append(self._take())
            position = newline + 1
        return frames

    def finish(self) -> list[Frame]:
        """End of stream: a trailing partial frame (no newline) is returned as a frame."""
        if self._discarded is not None or self._buffer.strip():
            return [self._take()]
        self._buffer.clear()
        return []

    def _append(self, data: bytes, start: int, end: int) -> None:
        if self._discarded is not None:
            self._discarded += end - start
            return
        self._buffer += data[start:end]
        if len(self._buffer) > self._max:
            self._discarded = len(self._buffer)
            self._buffer.clear()

    def _take(self) -> Frame:
        if self._discarded is not None:
            size, self._discarded = self._discarded, None
            return OversizedFrame(size)
        frame = bytes(self._buffer)
        self._buffer.clear()
        return frame
