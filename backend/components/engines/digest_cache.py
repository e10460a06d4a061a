"""A model file's weights digest, and the cache that keeps it from being computed twice.

A model's identity is the SHA-256 of its weights file (Ollama names its blobs by it, so a GGUF
in llama.cpp's store and the same file pulled by Ollama share it). Hashing a 40 GB file takes
minutes, so each digest is kept with the file's size and modification time in a small JSON file
and computed again only when either changes. Everything here blocks on the file system: call it
in a worker thread, never on the event loop.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import msgspec

from backend.common.files import write_private_atomic

log = logging.getLogger(__name__)

BLOCK: Final = 1 << 20  # bytes read at a time: large enough to hash at disk speed
_PREFIX: Final = "sha256:"
_CACHE_VERSION: Final = 1


class HashStopped(Exception):
    """Hashing was asked to stop (the broker is shutting down) before the file's end."""


class FileStamp(msgspec.Struct, frozen=True):
    """What says a file is unchanged since it was hashed: its size and mtime in nanoseconds."""

    size: int
    mtime_ns: int


class CachedDigest(msgspec.Struct, frozen=True):
    """A file's digest (``sha256:<hex>``) as of ``stamp``."""

    stamp: FileStamp
    digest: str


def stamp_of(path: Path) -> FileStamp | None:
    """The file's stamp, or None when it is missing or not a regular file."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    if not os.path.isfile(path):
        return None
    return FileStamp(stat.st_size, stat.st_mtime_ns)


def hash_file(path: Path, stop: threading.Event | None = None) -> str:
    """``sha256:<hex>`` of the file, read a block at a time; ``HashStopped`` once ``stop`` is
    set (checked between blocks, so a shutdown never waits for a whole file)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(BLOCK):
            if stop is not None and stop.is_set():
                raise HashStopped(str(path))
            digest.update(block)
    return _PREFIX + digest.hexdigest()


def cached_digest(
    entries: Mapping[str, CachedDigest], path: Path, stamp: FileStamp | None
) -> str | None:
    """The cached digest of ``path`` if the file still has the stamp it was hashed at."""
    if stamp is None:
        return None
    entry = entries.get(str(path))
    return entry.digest if entry is not None and entry.stamp == stamp else None


def load_cache(path: Path) -> dict[str, CachedDigest]:
    """The cache file's entries; a missing, unreadable or malformed file is an empty cache (the
    next save replaces it) and a malformed entry is skipped."""
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring the model digest cache %s: %s", path, exc)
        return {}
    files = document.get("files") if isinstance(document, dict) else None
    if not isinstance(files, dict):
        log.warning("ignoring the model digest cache %s: it has no files", path)
        return {}
    return {name: entry for name, raw in files.items() if (entry := _entry(raw)) is not None}


def save_cache(path: Path, entries: Mapping[str, CachedDigest]) -> None:
    """Replace the cache file atomically (0600: it names the model files on this computer)."""
    files = {
        name: {"size": e.stamp.size, "mtime_ns": e.stamp.mtime_ns, "digest": e.digest}
        for name, e in sorted(entries.items())
    }
    document = {"version": _CACHE_VERSION, "files": files}
    write_private_atomic(path, json.dumps(document, indent=1).encode())


def _entry(raw: object) -> CachedDigest | None:
    if not isinstance(raw, dict):
        return None
    size, mtime_ns, digest = raw.get("size"), raw.get("mtime_ns"), raw.get("digest")
    if not (_whole(size) and _whole(mtime_ns) and is_digest(digest)):
        return None
    assert isinstance(size, int) and isinstance(mtime_ns, int) and isinstance(digest, str)
    return CachedDigest(FileStamp(size, mtime_ns), digest)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_digest(value: object) -> bool:
    """Whether ``value`` is ``sha256:`` and 64 lower-case hex digits."""
    if not isinstance(value, str) or not value.startswith(_PREFIX):
        return False
    hex_part = value[len(_PREFIX) :]
    return len(hex_part) == 64 and all(c in "0123456789abcdef" for c in hex_part)
