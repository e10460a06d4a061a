"""Small real ``.tar.zst`` archives for tests, made as Ollama's Linux releases are: a tar in one
zstd frame with its content checksum (what the ``zstd`` tool writes)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import zstandard

Member = tuple[bytes, int] | str  # a file's bytes and mode, or a symlink's target


def tar_bytes(members: dict[str, Member]) -> bytes:
    """An uncompressed tar of ``members``, in order."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as bundle:
        for name, member in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(member, str):
                info.type, info.linkname = tarfile.SYMTYPE, member
                bundle.addfile(info)
            else:
                info.size, info.mode = len(member[0]), member[1]
                bundle.addfile(info, io.BytesIO(member[0]))
    return buffer.getvalue()


def compress(data: bytes) -> bytes:
    """``data`` as one zstd frame with its content checksum."""
    return zstandard.ZstdCompressor(write_checksum=True).compress(data)


def tar_zst(members: dict[str, Member]) -> bytes:
    """``members`` as the bytes of a ``.tar.zst``."""
    return compress(tar_bytes(members))


def write_tar_zst(path: Path, members: dict[str, Member]) -> Path:
    """``members`` as a ``.tar.zst`` at ``path``."""
    path.write_bytes(tar_zst(members))
    return path
