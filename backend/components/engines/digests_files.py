"""The weights digests of model files on this computer, hashed in the background.

A digest already cached for the file's size and mtime is answered at once; any other file is
queued and hashed later, one file at a time in a worker thread, so a listing never waits for a
hash and two large files never compete for the disk. A file that changes while it is hashed
(still being written) is not cached; it is hashed again once it holds still.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from backend.common.tasks import TaskSet
from backend.components.engines.digest_cache import (
    CachedDigest,
    FileStamp,
    HashStopped,
    cached_digest,
    hash_file,
    load_cache,
    save_cache,
    stamp_of,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
Hasher = Callable[[Path, threading.Event], str]


class FileDigests:
    """Owns the hashing task (at most one), the stop flag its worker thread reads between
    blocks, and the cache file at ``cache_path``. ``on_hashed`` is called on the event loop
    after each digest newly cached."""

    def __init__(
        self, cache_path: Path, on_hashed: Callable[[], None], *, hasher: Hasher = hash_file
    ) -> None:
        self._cache_path = cache_path
        self._on_hashed = on_hashed
        self._hasher = hasher
        self._lock = threading.Lock()  # the entries, between the loop's reads and the worker
        self._entries: dict[str, CachedDigest] | None = None  # read from disk on first use
        self._queue: dict[Path, FileStamp] = {}
        self._failed: dict[Path, FileStamp] = {}  # unreadable as of that stamp: not retried
        self._stop = threading.Event()
        self._tasks = TaskSet("engines:digests")
        self._worker: asyncio.Task[None] | None = None

    async def lookup(self, paths: Mapping[str, Path]) -> dict[str, str]:
        """Name -> digest of each file whose digest is cached for its current size and mtime;
        the other existing files are queued for hashing."""
        stamps = await asyncio.to_thread(self._stamps, paths.values())
        with self._lock:
            entries = self._entries or {}
            found = {
                name: digest
                for name, path in paths.items()
                if (digest := cached_digest(entries, path, stamps.get(path))) is not None
            }
        for name, path in paths.items():
            stamp = stamps.get(path)
            if name not in found and stamp is not None and self._failed.get(path) != stamp:
                self._queue[path] = stamp
        if self._stop.is_set():
            return found  # closing: nothing new is hashed
        if self._queue and (self._worker is None or self._worker.done()):
            self._worker = self._tasks.spawn(self._work(), name="hash")
        return found

    @property
    def queued(self) -> int:
        """Files waiting to be hashed (the one being hashed not counted)."""
        return len(self._queue)

    async def close(self) -> None:
        """Stop hashing (the worker thread stops within one block) and forget the queue."""
        self._stop.set()
        try:
            await self._tasks.close()
        finally:
            self._queue.clear()
            self._stop.clear()

    def _stamps(self, paths: Iterable[Path]) -> dict[Path, FileStamp]:
        with self._lock:
            if self._entries is None:
                self._entries = load_cache(self._cache_path)
        return {path: stamp for path in paths if (stamp := stamp_of(path)) is not None}

    async def _work(self) -> None:
        while self._queue and not self._stop.is_set():
            path = next(iter(self._queue))
            stamp = self._queue.pop(path)
            try:
                hashed = await self._in_thread(self._hash_one, path)
            except HashStopped:
                return
            except OSError as exc:
                log.warning("cannot hash the model file %s: %s", path, exc)
                self._failed[path] = stamp
                continue
            if hashed:
                self._on_hashed()

    def _hash_one(self, path: Path) -> bool:
        """Hash ``path`` and cache its digest; False when it was cached meanwhile, is gone, or
        changed while being read."""
        before = stamp_of(path)
        with self._lock:
            if before is None or cached_digest(self._entries or {}, path, before) is not None:
                return False
        digest = self._hasher(path, self._stop)
        if stamp_of(path) != before:
            return False  # still being written: the next listing queues it again
        with self._lock:
            entries = dict(self._entries or {})
        entries[str(path)] = CachedDigest(before, digest)
        entries = {name: entry for name, entry in entries.items() if os.path.exists(name)}
        save_cache(self._cache_path, entries)  # only this worker writes entries
        with self._lock:
            self._entries = entries
        return True

    async def _in_thread(self, function: Callable[[Path], T], path: Path) -> T:
        """``function(path)`` in a worker thread; when cancelled, the thread is told to stop
        and waited for (it stops within one block), so it never outlives its owner."""
        future = asyncio.get_running_loop().run_in_executor(None, function, path)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            self._stop.set()
            await asyncio.gather(future, return_exceptions=True)
            raise
