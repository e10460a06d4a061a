"""Model file digests: hashed once in the background, cached with size and mtime, hashed again
only when either changes; a damaged cache is ignored and rewritten."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from backend.components.engines.digest_cache import (
    BLOCK,
    HashStopped,
    hash_file,
    is_digest,
    load_cache,
)
from backend.components.engines.digests_files import FileDigests
from tests.unit.components.engine_fakes import eventually


def _sha(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


class _Hashing:
    """A hasher that records which files it hashed, around the real one."""

    def __init__(self) -> None:
        self.hashed: list[str] = []

    def __call__(self, path: Path, stop: threading.Event) -> str:
        self.hashed.append(path.name)
        return hash_file(path, stop)


def _files(
    tmp_path: Path, hasher: _Hashing | None = None
) -> tuple[FileDigests, list[None], _Hashing]:
    told: list[None] = []
    hashing = hasher or _Hashing()
    return (
        FileDigests(tmp_path / "digests.json", lambda: told.append(None), hasher=hashing),
        told,
        hashing,
    )


async def _hashed(files: FileDigests, paths: dict[str, Path]) -> dict[str, str]:
    """Look up until every file's digest is known (each miss is hashed in the background)."""
    found: dict[str, str] = {}

    async def known() -> bool:
        nonlocal found
        found = await files.lookup(paths)
        return len(found) == len(paths)

    async with asyncio.timeout(5):
        while not await known():
            await asyncio.sleep(0.005)
    return found


async def test_a_file_is_hashed_once_in_the_background_then_answered_from_the_cache(
    tmp_path: Path,
) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(os.urandom(BLOCK * 2 + 5))
    files, told, hashing = _files(tmp_path)
    assert await files.lookup({"m": model}) == {}  # a listing never waits for a hash
    assert await _hashed(files, {"m": model}) == {"m": _sha(model)}
    await eventually(lambda: told == [None])
    assert hashing.hashed == ["m.gguf"]
    # A broker started later reads the cache: nothing is hashed again.
    again, _, rehashing = _files(tmp_path)
    assert await again.lookup({"m": model}) == {"m": _sha(model)}
    assert rehashing.hashed == []
    await files.close()
    await again.close()


@pytest.mark.parametrize("change", ["mtime", "size"])
async def test_a_file_whose_size_or_mtime_changed_is_hashed_again(
    tmp_path: Path, change: str
) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"first weights")
    files, _, hashing = _files(tmp_path)
    first = await _hashed(files, {"m": model})
    if change == "mtime":
        model.write_bytes(b"other weights")  # same size
        os.utime(model, ns=(1, model.stat().st_mtime_ns + 1_000_000_000))
    else:
        with model.open("ab") as handle:
            handle.write(b"!")
    assert await files.lookup({"m": model}) == {}
    second = await _hashed(files, {"m": model})
    assert second == {"m": _sha(model)} != first
    assert hashing.hashed == ["m.gguf", "m.gguf"]
    await files.close()


async def test_a_damaged_cache_file_is_ignored_and_rewritten(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    cache = tmp_path / "digests.json"
    cache.write_text("{not json")
    files, _, _ = _files(tmp_path)
    assert await _hashed(files, {"m": model}) == {"m": _sha(model)}
    document = json.loads(cache.read_text())
    assert document["files"][str(model)]["digest"] == _sha(model)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    await files.close()


def test_malformed_cache_entries_are_skipped_and_others_kept(tmp_path: Path) -> None:
    cache = tmp_path / "digests.json"
    good = {"size": 3, "mtime_ns": 7, "digest": "sha256:" + "a" * 64}
    files = {
        "/good": good,
        "/bad-digest": {**good, "digest": "md5:abc"},
        "/bad-size": {**good, "size": True},
        "/not-a-dict": 5,
    }
    cache.write_text(json.dumps({"version": 1, "files": files}))
    assert list(load_cache(cache)) == ["/good"]
    cache.write_text(json.dumps([1, 2]))
    assert load_cache(cache) == {}


async def test_a_file_that_changes_while_hashed_is_not_cached(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"half written")

    class _Growing(_Hashing):
        def __call__(self, path: Path, stop: threading.Event) -> str:
            digest = super().__call__(path, stop)
            if len(self.hashed) == 1:
                with path.open("ab") as handle:
                    handle.write(b" and more")
            return digest

    files, told, hashing = _files(tmp_path, _Growing())
    assert await _hashed(files, {"m": model}) == {"m": _sha(model)}
    await eventually(lambda: told == [None])
    assert hashing.hashed == ["m.gguf", "m.gguf"]
    await files.close()


async def test_a_missing_file_is_not_queued(tmp_path: Path) -> None:
    files, _, hashing = _files(tmp_path)
    assert await files.lookup({"gone": tmp_path / "gone.gguf"}) == {}
    assert files.queued == 0 and hashing.hashed == []
    await files.close()


def test_hashing_stops_between_blocks_when_told(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x" * (BLOCK + 1))
    stop = threading.Event()
    assert hash_file(model, stop) == _sha(model) and is_digest(_sha(model))
    stop.set()
    with pytest.raises(HashStopped):
        hash_file(model, stop)


async def test_close_stops_a_hash_under_way_and_its_thread(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    started = threading.Event()

    def stuck(path: Path, stop: threading.Event) -> str:
        started.set()
        stop.wait(5)
        raise HashStopped(str(path))

    files = FileDigests(tmp_path / "digests.json", lambda: None, hasher=stuck)
    await files.lookup({"m": model})
    await eventually(started.is_set)
    await files.close()
    assert not (tmp_path / "digests.json").exists()
