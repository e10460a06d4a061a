"""Hugging Face's answers read into PAIR's wire types: pure functions, no I/O.

Only the fields PAIR shows are read; any other field, present or not, is ignored, so a change
elsewhere in Hugging Face's answers changes nothing here."""

from __future__ import annotations

from typing import TypeVar
from urllib.parse import quote

import msgspec

from backend.components.hub.quant import (
    is_gguf,
    quantization,
    split_part,
)
from backend.protocol.types.hub import HubFile, HubModel

T = TypeVar("T")


class AnswerError(ValueError):
    """An answer that is not of the shape Hugging Face documents; the message says how."""


class _SearchEntry(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    downloads: int = 0
    likes: int = 0
    last_modified: str | None = msgspec.field(default=None, name="lastModified")
    created_at: str | None = msgspec.field(default=None, name="createdAt")
    pipeline_tag: str | None = None


class _Lfs(msgspec.Struct, frozen=True, kw_only=True):
    size: int


class _TreeEntry(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    path: str
    size: int = 0
    lfs: _Lfs | None = None


def parse_search(body: bytes) -> list[HubModel]:
    """The repositories of an ``/api/models`` answer, in its order."""
    entries = _decode(body, list[_SearchEntry], "the search answer")
    return [
        HubModel(
            repo=entry.id,
            downloads=entry.downloads,
            likes=entry.likes,
            updated=entry.last_modified or entry.created_at,
            pipeline=entry.pipeline_tag,
        )
        for entry in entries
    ]


def parse_tree(body: bytes, repo: str, base_url: str) -> list[HubFile]:
    """The GGUF models of an ``/api/models/REPO/tree/main`` answer, smallest first; a split
    model's parts are one entry named by its first part, with their total size."""
    entries = _decode(body, list[_TreeEntry], "the file list")
    sizes = {
        entry.path: entry.lfs.size if entry.lfs is not None else entry.size
        for entry in entries
        if entry.type == "file" and is_gguf(entry.path)
    }
    files = [*_single_files(sizes, repo, base_url), *_split_files(sizes, repo, base_url)]
    return sorted(files, key=lambda file: (file.size, file.name))


def download_url(base_url: str, repo: str, path: str) -> str:
    """Where a repository's file downloads from (Hugging Face redirects it to its CDN)."""
    return f"{base_url.rstrip('/')}/{repo}/resolve/main/{quote(path)}"


def _single_files(sizes: dict[str, int], repo: str, base_url: str) -> list[HubFile]:
    return [
        HubFile(
            name=path,
            size=size,
            quant=quantization(path),
            url=download_url(base_url, repo, path),
        )
        for path, size in sizes.items()
        if split_part(path) is None
    ]


def _split_files(sizes: dict[str, int], repo: str, base_url: str) -> list[HubFile]:
    totals: dict[tuple[str, int], int] = {}  # (stem, parts) -> their total size
    firsts: dict[tuple[str, int], str] = {}
    for path, size in sizes.items():
        part = split_part(path)
        if part is None:
            continue
        key = (part.stem, part.total)
        totals[key] = totals.get(key, 0) + size
        if part.part == 1:
            firsts[key] = path
    # A split model without its first part cannot be loaded: it is left out.
    return [
        HubFile(
            name=first,
            size=totals[key],
            quant=quantization(first),
            url=download_url(base_url, repo, first),
            parts=key[1],
        )
        for key, first in sorted(firsts.items())
    ]


def _decode(body: bytes, shape: type[T], what: str) -> T:
    try:
        return msgspec.json.decode(body, type=shape)
    except msgspec.DecodeError as exc:
        raise AnswerError(f"{what} is not what Hugging Face sends ({exc})") from None
