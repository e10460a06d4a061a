"""llama.cpp's model store: one private directory of ``<name>.gguf`` files on this node.

A model's name is its file's stem. Pulls stream to ``<name>.gguf.part`` (0600), hashing as they
write, and become ``<name>.gguf`` by one atomic rename only after the checksum (when given) and
the GGUF header check pass, so a listing never shows half a model. Any failure removes the
partial file.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

import aiohttp
import msgspec

from backend.common.files import ensure_private_dir, fsync_dir
from backend.common.gguf import GgufError, GgufInfo, read_file
from backend.core.plain_errors import plain_error
from backend.protocol import errors
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import ModelDetails, PullProgress

log = logging.getLogger(__name__)

SUFFIX = ".gguf"
PART_SUFFIX = ".part"
CHUNK = 256 * 1024
PROGRESS_INTERVAL = 0.1  # seconds: at most ~10 progress pushes a second
_NAME = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
# llama.cpp's ``llama_pooling_type`` numbers; 0 (none) is absent: it yields no vector per input.
_POOLING_NAMES = {1: "mean", 2: "cls", 3: "last", 4: "rank"}
_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=20, sock_read=60)


class StoredModel(msgspec.Struct, frozen=True):
    """One model file in the store."""

    name: str
    path: Path
    size: int  # bytes
    details: ModelDetails
    pooling: str | None = None  # the pooling the file declares (``pooling_name``)


def valid_name(name: str) -> str:
    """``name`` if it can name a model file, else ``InvalidParams`` saying what a name may be."""
    if not _NAME.fullmatch(name) or name.startswith("."):
        raise errors.InvalidParams(
            f"invalid model name {name!r}: use 1-128 letters, digits, '.', '_', '-' or ':', "
            "not starting with '.'"
        )
    return name


def name_from_url(url: str) -> str:
    """The model name a download URL suggests: its path's last segment without ``.gguf``."""
    segment = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    if segment.lower().endswith(SUFFIX):
        segment = segment[: -len(SUFFIX)]
    try:
        return valid_name(segment)
    except errors.InvalidParams:
        raise errors.InvalidParams(
            f"cannot make a model name from {url!r}; give the model a name"
        ) from None


class ModelStore:
    """The ``*.gguf`` files under ``root`` (made 0700 when first written).

    ``list``, ``get`` and ``delete`` block on the file system (call them in a thread); ``pull``
    runs on the event loop and does its blocking work in threads.
    """

    def __init__(self, root: Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self._clock = clock
        self._pulling: set[str] = set()
        self._lock = threading.Lock()  # list() runs in threads
        self._described: dict[Path, tuple[tuple[int, int, int], StoredModel]] = {}
        self._warned: dict[Path, tuple[int, int, int]] = {}

    def list(self) -> list[StoredModel]:
        """The readable models, sorted by name; partial and unreadable files are skipped."""
        try:
            paths = sorted(self.root.glob(f"*{SUFFIX}"))
        except OSError as exc:
            log.warning("cannot list the model store %s: %s", self.root, exc)
            return []
        found = [model for path in paths if (model := self._describe(path)) is not None]
        present = set(paths)
        with self._lock:
            for cache in (self._described, self._warned):
                for gone in set(cache) - present:
                    del cache[gone]
        return sorted(found, key=lambda model: model.name)

    def get(self, name: str) -> StoredModel:
        """The model called ``name``; ``NotFound`` names it and what the store holds."""
        path = self.path(name)
        if not path.is_file():
            held = ", ".join(model.name for model in self.list()) or "nothing"
            raise errors.NotFound(
                f"no model {name!r} in {self.root} (it holds {held})", {"model": name}
            )
        try:
            return self._read(path)
        except (OSError, GgufError) as exc:
            raise errors.NotFound(
                f"the model {name!r} cannot be read: {_reason(exc)}", {"model": name}
            ) from None

    def path(self, name: str) -> Path:
        """Where the model called ``name`` is or would be."""
        return self.root / f"{valid_name(name)}{SUFFIX}"

    def delete(self, name: str) -> None:
        """Remove the model called ``name``; ``NotFound`` if there is none."""
        path = self.path(name)
        try:
            path.unlink()
        except FileNotFoundError:
            raise errors.NotFound(f"no model {name!r} in {self.root}", {"model": name}) from None
        with self._lock:
            self._described.pop(path, None)

    async def pull(
        self,
        session: aiohttp.ClientSession,
        url: str,
        name: str,
        *,
        sha256: str | None,
        progress: Callable[[PullProgress], None],
        engine: EngineName,
    ) -> StoredModel:
        """Download ``url`` as the model ``name`` and return it once it is in the store.

        Refusals before the download (a bad URL, name or checksum, a name that exists or is
        being pulled) raise without progress; after that exactly one progress has ``done``.
        Raises ``Unavailable`` for the network, ``InvalidParams`` for content that is not the
        model asked for; a failed or cancelled pull leaves no file behind.
        """
        valid_name(name)
        expected = _check_request(url, sha256)
        if name in self._pulling:
            raise errors.Conflict(f"the model {name!r} is already being pulled", {"model": name})
        self._pulling.add(name)
        try:
            if await asyncio.to_thread(self.path(name).exists):
                raise errors.Conflict(
                    f"a model called {name!r} already exists; delete it first", {"model": name}
                )
            report = _Reporter(engine, name, progress, self._clock)
            return await self._pull_reported(session, url, name, expected, report)
        finally:
            self._pulling.discard(name)

    async def _pull_reported(
        self,
        session: aiohttp.ClientSession,
        url: str,
        name: str,
        expected: str | None,
        report: _Reporter,
    ) -> StoredModel:
        """The download with its final progress: success, or the error (none on cancellation,
        which only cleans up)."""
        try:
            try:
                model = await self._download(session, url, name, expected, report)
            except OSError as exc:  # the store's disk: full, read-only, not ours
                raise errors.InternalError(f"cannot save {name} in {self.root}: {exc}") from exc
        except errors.RpcError as exc:
            report.fail(exc.message)
            raise
        except Exception as exc:
            report.fail(str(exc) or type(exc).__name__)
            raise
        report.succeed(model.size)
        return model

    async def _download(
        self,
        session: aiohttp.ClientSession,
        url: str,
        name: str,
        expected: str | None,
        report: _Reporter,
    ) -> StoredModel:
        part = self.root / f"{name}{SUFFIX}{PART_SUFFIX}"
        handle = _open_part(self.root, part)  # quick, and never orphaned by a cancellation
        try:
            actual = await _fetch(session, url, name, handle, report)
            report.stage("verifying")
            handle.flush()
            await asyncio.to_thread(os.fsync, handle.fileno())
            handle.close()
            if expected is not None and actual != expected:
                raise errors.InvalidParams(
                    f"the download of {name} does not match its checksum: expected sha256 "
                    f"{expected}, got {actual}; nothing was kept"
                )
            info = await asyncio.to_thread(_check_gguf, part, url)
            return await asyncio.to_thread(self._install, part, name, info)
        finally:
            # Synchronous on purpose: it must also run when the pull is cancelled.
            handle.close()
            with contextlib.suppress(FileNotFoundError):
                part.unlink()

    def _install(self, part: Path, name: str, info: GgufInfo) -> StoredModel:
        target = self.path(name)
        if target.exists():  # placed there by hand while we downloaded
            raise errors.Conflict(f"a model called {name!r} appeared meanwhile; kept that one")
        os.replace(part, target)
        fsync_dir(self.root)
        stat = target.stat()
        model = _stored(target, stat.st_size, info)
        with self._lock:
            self._described[target] = (_signature(stat), model)
        return model

    def _describe(self, path: Path) -> StoredModel | None:
        """The model at ``path``, or ``None`` (warned about once per version of the file) when
        it cannot be read as one."""
        try:
            return self._read(path)
        except (OSError, GgufError, errors.InvalidParams) as exc:
            self._warn_once(path, exc)
            return None

    def _read(self, path: Path) -> StoredModel:
        """The model at ``path``, from the cache while the file is unchanged."""
        name = valid_name(path.stem)
        stat = path.stat()
        signature = _signature(stat)
        with self._lock:
            cached = self._described.get(path)
        if cached is not None and cached[0] == signature:
            return cached[1]
        model = _stored(path, stat.st_size, read_file(path), name=name)
        with self._lock:
            self._described[path] = (signature, model)
        return model

    def _warn_once(self, path: Path, exc: Exception) -> None:
        try:
            signature = _signature(path.stat())
        except OSError:
            signature = (0, 0, 0)
        with self._lock:
            if self._warned.get(path) == signature:
                return
            self._warned[path] = signature
        log.warning("skipping %s in the model store: %s", path.name, _reason(exc))


class _Reporter:
    """Sends one pull's progress: throttled downloading steps, then exactly one ``done``."""

    def __init__(
        self,
        engine: EngineName,
        model: str,
        sink: Callable[[PullProgress], None],
        clock: Callable[[], float],
    ) -> None:
        self._engine, self._model, self._sink, self._clock = engine, model, sink, clock
        self._last: float | None = None

    def downloading(self, completed: int, total: int | None, *, force: bool = False) -> None:
        """Bytes received so far (``total`` when the server said; percent only then)."""
        now = self._clock()
        if not force and self._last is not None and now - self._last < PROGRESS_INTERVAL:
            return
        self._last = now
        percent = None if not total else round(100 * completed / total, 1)
        self._send(stage="downloading", percent=percent, completed=completed, total=total)

    def stage(self, stage: str) -> None:
        """A step that cannot be measured."""
        self._send(stage=stage)

    def fail(self, message: str) -> None:
        """The last step: the pull failed with ``message``."""
        self._send(stage="error", done=True, error=message)

    def succeed(self, size: int) -> None:
        """The last step: the model is in the store."""
        self._send(stage="success", percent=100.0, completed=size, total=size, done=True)

    def _send(
        self,
        *,
        stage: str,
        percent: float | None = None,
        completed: int | None = None,
        total: int | None = None,
        done: bool = False,
        error: str | None = None,
    ) -> None:
        self._sink(
            PullProgress(
                engine=self._engine,
                model=self._model,
                stage=stage,
                percent=percent,
                completed=completed,
                total=total,
                done=done,
                error=error,
            )
        )


def _check_request(url: str, sha256: str | None) -> str | None:
    """The checksum in lower case; ``InvalidParams`` for a URL or checksum that cannot work."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise errors.InvalidParams(f"models are pulled over http or https, not from {url!r}")
    if sha256 is None:
        return None
    if not _SHA256.fullmatch(sha256):
        raise errors.InvalidParams(
            f"the checksum {sha256!r} is not a SHA-256 (64 hexadecimal digits)"
        )
    return sha256.lower()


async def _fetch(
    session: aiohttp.ClientSession, url: str, name: str, handle: BinaryIO, report: _Reporter
) -> str:
    """Stream ``url`` into ``handle``; the SHA-256 of what was written."""
    digest = hashlib.sha256()
    try:
        async with session.get(url, timeout=_TIMEOUT) as response:
            if response.status >= 400:
                raise errors.Unavailable(
                    f"downloading {name} from {url} failed: HTTP {response.status} "
                    f"{response.reason or ''}".rstrip()
                )
            total, completed = response.content_length, 0
            report.downloading(completed, total, force=True)
            async for chunk in response.content.iter_chunked(CHUNK):
                handle.write(chunk)
                digest.update(chunk)
                completed += len(chunk)
                report.downloading(completed, total)
            report.downloading(completed, total, force=True)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise errors.Unavailable(f"cannot download {name}: {plain_error(exc, url)}") from None
    return digest.hexdigest()


def _open_part(root: Path, part: Path) -> BinaryIO:
    ensure_private_dir(root)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    # A stale partial file from an earlier run keeps its old mode. Windows has no fchmod
    # (and no such mode bits: the file's ACL comes from the private folder).
    if hasattr(os, "fchmod"):
        os.fchmod(fd, 0o600)
    return os.fdopen(fd, "wb")


def _check_gguf(part: Path, url: str) -> GgufInfo:
    try:
        return read_file(part)
    except GgufError as exc:
        raise errors.InvalidParams(
            f"not a GGUF model: {exc.message} (downloaded from {url}); nothing was kept"
        ) from None


def _stored(path: Path, size: int, info: GgufInfo, *, name: str | None = None) -> StoredModel:
    details = ModelDetails(
        file=path.name,
        architecture=info.architecture,
        quantization=info.quantization,
        context_length=info.context_length,
    )
    pooling = pooling_name(info)
    return StoredModel(name or path.stem, path, size, details, pooling)


def pooling_name(info: GgufInfo) -> str | None:
    """llama-server's ``--pooling`` name for the pooling the file declares; None when it declares
    none (a generative model), so the launch chooses."""
    if info.architecture is None:
        return None
    declared = info.metadata.get(f"{info.architecture}.pooling_type")
    if isinstance(declared, bool) or not isinstance(declared, int):
        return None
    return _POOLING_NAMES.get(declared)


def _reason(exc: Exception) -> str:
    return exc.message if isinstance(exc, GgufError | errors.RpcError) else str(exc)


def _signature(stat: os.stat_result) -> tuple[int, int, int]:
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)
