"""A zstd-compressed tar read as it is decompressed: Ollama publishes its Linux releases as
``ollama-linux-<arch>.tar.zst``, and Python's ``tarfile`` reads no zstd before 3.14.

The compressed file is read a chunk at a time and each zstd frame decompressed as its bytes
arrive, so neither the archive nor its contents are ever held whole; ``tarfile`` reads the result
as a stream (``r|``). A file that ends inside a frame is an error: ``zstandard``'s own readers
return what they decoded and stop there, which would make a cut-off download look like a
shorter, complete archive.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import zstandard

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

ZstdError = zstandard.ZstdError
# Every zstd frame starts with these bytes (RFC 8878, 3.1.1).
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# Compressed bytes read at a time: what is held decompressed is at most this times the ratio
# (a few MiB for an engine's executables and libraries).
CHUNK = 64 * 1024


def is_zstd(path: Path) -> bool:
    """Whether the file at ``path`` starts as a zstd frame does."""
    with path.open("rb") as handle:
        return handle.read(len(ZSTD_MAGIC)) == ZSTD_MAGIC


@contextmanager
def open_tar_zst(path: Path) -> Iterator[tarfile.TarFile]:
    """The tar inside the zstd file at ``path``, read as a stream: its members in order, once."""
    with (
        path.open("rb") as compressed,
        io.BufferedReader(ZstdFrames(compressed), CHUNK) as decompressed,
        tarfile.open(fileobj=decompressed, mode="r|") as bundle,
    ):
        yield bundle


class ZstdFrames(io.RawIOBase):
    """The decompressed bytes of the zstd frames in ``source``, one frame after another (the
    ``zstd`` tool writes one frame, a parallel compressor several); ``ZstdError`` for bytes
    that are not zstd and for a source that ends inside a frame. Does not close ``source``."""

    def __init__(self, source: BinaryIO) -> None:
        super().__init__()
        self._source = source
        self._frame = zstandard.ZstdDecompressor().decompressobj()
        self._in_frame = False
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        """Always: this is a reader."""
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        """Fill ``buffer`` with the next decompressed bytes; 0 once every frame is read."""
        while not self._pending:
            data = self._source.read(CHUNK)
            if not data:
                if self._in_frame:
                    raise ZstdError(
                        "the zstd data stops inside a frame, as a cut-off download does"
                    )
                return 0
            self._pending = memoryview(self._decompress(data))
        target = memoryview(buffer).cast("B")
        count = min(len(target), len(self._pending))
        target[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def _decompress(self, data: bytes) -> bytes:
        """What ``data`` decompresses to, starting a new frame where one ends in it."""
        parts = []
        while data:
            self._in_frame = True
            parts.append(self._frame.decompress(data))
            if not self._frame.eof:
                break
            data = self._frame.unused_data
            self._frame = zstandard.ZstdDecompressor().decompressobj()
            self._in_frame = False
        return b"".join(parts)
