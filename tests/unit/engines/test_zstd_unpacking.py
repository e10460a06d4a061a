"""Zstd-compressed tars (Ollama's Linux ``.tar.zst``): the frames read as a stream, a chunk of
the file at a time; unpacked with the same ``data`` filter as any tar, so a member or link that
would land outside the install dir is refused; a damaged or cut-off file unpacks nothing."""

from __future__ import annotations

import io
import os
import struct
import tarfile
from pathlib import Path

import pytest

from backend.components.engines import zstd_stream
from backend.components.engines.unpacking import unpack
from backend.components.engines.zstd_stream import CHUNK, ZstdError, ZstdFrames, is_zstd
from backend.protocol import errors
from tests.unit.engines.tar_zst import Member, compress, tar_bytes, write_tar_zst

OLLAMA: dict[str, Member] = {
    "bin/ollama": (b"#!/bin/sh\necho ollama\n", 0o755),
    "lib/ollama/libggml-base.so": (b"\x7fELF", 0o644),
    "lib/ollama/cuda_v13/libcublas.so.13.1.0.3": (b"\x7fELF", 0o644),
    "lib/ollama/cuda_v13/libcublas.so.13": "libcublas.so.13.1.0.3",
}


class RecordingSource(io.BytesIO):
    """A compressed file that records how much each read asked for."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.asked: list[int] = []

    def read(self, size: int | None = -1, /) -> bytes:
        self.asked.append(-1 if size is None else size)
        return super().read(size)


def _decompressed(data: bytes) -> bytes:
    return io.BufferedReader(ZstdFrames(io.BytesIO(data))).read()


# -- the stream -------------------------------------------------------------------------------


def test_the_frames_are_read_a_chunk_at_a_time_as_the_reader_asks() -> None:
    content = os.urandom(5 * CHUNK)  # random bytes stay as large compressed
    source = RecordingSource(compress(content))
    frames = ZstdFrames(source)
    first = bytearray(100)
    assert frames.readinto(first) == 100 and bytes(first) == content[:100]
    assert source.asked == [CHUNK], "one chunk read for the first bytes, not the whole file"
    rest = io.BufferedReader(frames).read()
    assert content[:100] + rest == content
    assert set(source.asked) == {CHUNK} and len(source.asked) >= 5


def test_frames_written_one_after_another_read_as_one_stream() -> None:
    parts = [os.urandom(CHUNK + 7), b"", b"middle" * 1000, os.urandom(13)]
    # A skippable frame (RFC 8878, 3.1.2) carries metadata and decompresses to nothing.
    skippable = struct.pack("<II", 0x184D2A50, 4) + b"meta"
    data = b"".join(compress(part) for part in parts[:2]) + skippable
    data += b"".join(compress(part) for part in parts[2:])
    assert _decompressed(data) == b"".join(parts)


@pytest.mark.parametrize("cut", [1, 7, 1000])
def test_a_file_that_ends_inside_a_frame_is_an_error(cut: int) -> None:
    data = compress(os.urandom(3 * CHUNK))
    with pytest.raises(ZstdError, match="stops inside a frame"):
        _decompressed(data[:-cut])


@pytest.mark.parametrize(
    "data",
    [b"PK\x03\x04 not zstd at all", zstd_stream.ZSTD_MAGIC + b"\xff" * 64],
    ids=["not-zstd", "broken-header"],
)
def test_bytes_that_are_not_zstd_are_an_error(data: bytes) -> None:
    with pytest.raises(ZstdError):
        _decompressed(data)


def test_zstd_is_known_by_its_magic_number(tmp_path: Path) -> None:
    tar_zst = write_tar_zst(tmp_path / "a.tar.zst", OLLAMA)
    gz = tmp_path / "a.tgz"
    with tarfile.open(gz, "w:gz"):
        pass
    assert is_zstd(tar_zst) and not is_zstd(gz)


# -- unpacking --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tar.zst", "auto"])
def test_a_tar_zst_unpacks_with_its_modes_and_links(tmp_path: Path, kind: str) -> None:
    archive = write_tar_zst(tmp_path / "ollama.download", OLLAMA)
    install_dir = tmp_path / "engines" / "ollama"
    unpack(archive, kind, install_dir, name="Ollama", keep_modes=True)
    assert os.access(install_dir / "bin" / "ollama", os.X_OK)
    link = install_dir / "lib" / "ollama" / "cuda_v13" / "libcublas.so.13"
    assert link.is_symlink() and link.read_bytes() == b"\x7fELF"
    assert (install_dir / "lib" / "ollama" / "libggml-base.so").is_file()
    assert not archive.exists(), "the download is removed"
    assert sorted(p.name for p in install_dir.parent.iterdir()) == ["ollama"]


def test_a_tar_zst_holding_one_folder_unwraps(tmp_path: Path) -> None:
    archive = write_tar_zst(tmp_path / "a.download", {"ollama-0.14/bin/ollama": (b"x", 0o755)})
    install_dir = tmp_path / "ollama"
    unpack(archive, "tar.zst", install_dir, unwrap=True)
    assert (install_dir / "bin" / "ollama").is_file()


@pytest.mark.parametrize(
    ("members", "refused"),
    [
        ({"bin/ollama": (b"x", 0o755), "../escaped": (b"x", 0o644)}, "outside the destination"),
        ({"bin/ollama": (b"x", 0o755), "lib/out": "../../escaped"}, "outside the destination"),
        ({"lib/etc": "/etc/passwd"}, "absolute path"),
    ],
    ids=["member", "relative-link", "absolute-link"],
)
def test_a_member_outside_the_install_dir_unpacks_nothing(
    tmp_path: Path, members: dict[str, Member], refused: str
) -> None:
    engines = tmp_path / "engines"
    engines.mkdir()
    archive = write_tar_zst(engines / "ollama.download", members)
    with pytest.raises(errors.InternalError) as raised:
        unpack(archive, "tar.zst", engines / "ollama", name="Ollama")
    assert refused in raised.value.message and "nothing was unpacked" in raised.value.message
    assert list(engines.iterdir()) == [], "no install dir, no scratch folder, no download"
    assert not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "not-a-tar"])
def test_a_damaged_tar_zst_unpacks_nothing_and_says_so(tmp_path: Path, damage: str) -> None:
    engines = tmp_path / "engines"
    engines.mkdir()
    members: dict[str, Member] = {"bin/ollama": (os.urandom(4 * CHUNK), 0o755)}
    data = compress(tar_bytes(members))
    if damage == "corrupt":
        middle = len(data) // 2
        flipped = bytes(b ^ 0xFF for b in data[middle : middle + 64])
        data = data[:middle] + flipped + data[middle + 64 :]
    elif damage == "truncated":
        data = data[: len(data) // 2]
    else:
        data = compress(b"<html>Not Found</html>")
    archive = engines / "ollama.download"
    archive.write_bytes(data)
    with pytest.raises(errors.InternalError) as raised:
        unpack(archive, "tar.zst", engines / "ollama", name="Ollama")
    assert raised.value.message.startswith("the download of Ollama is not an archive PAIR can")
    assert list(engines.iterdir()) == []
