"""The GGUF metadata reader: files written by the real ``gguf`` package (value types, arrays
skipped, quantization names, context length), truncation at every cut, and hostile headers that
must fail fast with small reads and small allocations."""

from __future__ import annotations

import io
import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import gguf
import pytest

from backend.common.gguf import (
    FILE_TYPES,
    MAX_ARRAY_ITEMS,
    MAX_KEY_BYTES,
    MAX_STRING_BYTES,
    GgufError,
    quantization_name,
    read_file,
    read_info,
)
from backend.devtools.tiny_model import write_model

Build = Callable[[gguf.GGUFWriter], None]


def _write(
    path: Path,
    build: Build,
    *,
    arch: str = "llama",
    endianess: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE,
) -> Path:
    """A header-and-metadata-only GGUF written by ``gguf.GGUFWriter``."""
    writer = gguf.GGUFWriter(path, arch=arch, endianess=endianess)
    build(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


def _mixed(writer: gguf.GGUFWriter) -> None:
    """Every value type, with arrays (of numbers, strings and arrays) between scalars."""
    writer.add_name("Mixed")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    writer.add_context_length(8192)
    writer.add_uint8("t.u8", 200)
    writer.add_int8("t.i8", -100)
    writer.add_uint16("t.u16", 60000)
    writer.add_int16("t.i16", -30000)
    writer.add_uint32("t.u32", 4_000_000_000)
    writer.add_int32("t.i32", -2_000_000_000)
    writer.add_float32("t.f32", 0.5)
    writer.add_bool("t.yes", True)
    writer.add_bool("t.no", False)
    writer.add_array("tokenizer.ggml.tokens", ["<s>", "hello", "", "wörld"])
    writer.add_string("t.string", "naïve ☃")
    writer.add_array("tokenizer.ggml.scores", [0.0, -1.5, 2.25])
    writer.add_uint64("t.u64", 2**63 + 5)
    writer.add_array("t.nested", [[1, 2], [3]])
    writer.add_int64("t.i64", -(2**62))
    writer.add_float64("t.f64", 1e-300)
    writer.add_key_value("t.empty", "", gguf.GGUFValueType.STRING)  # add_string drops ""


# -- files the gguf package writes --------------------------------------------------------------


def test_every_scalar_type_is_read_and_arrays_are_skipped(tmp_path: Path) -> None:
    info = read_file(_write(tmp_path / "mixed.gguf", _mixed))
    assert (info.version, info.tensor_count) == (3, 0)
    assert (info.architecture, info.name) == ("llama", "Mixed")
    assert (info.quantization, info.context_length) == ("Q4_K_M", 8192)
    assert info.metadata == {
        "general.architecture": "llama",
        "general.name": "Mixed",
        "general.file_type": 15,
        "llama.context_length": 8192,
        "t.u8": 200,
        "t.i8": -100,
        "t.u16": 60000,
        "t.i16": -30000,
        "t.u32": 4_000_000_000,
        "t.i32": -2_000_000_000,
        "t.f32": 0.5,
        "t.yes": True,
        "t.no": False,
        "t.string": "naïve ☃",
        "t.u64": 2**63 + 5,
        "t.i64": -(2**62),
        "t.f64": 1e-300,
        "t.empty": "",
    }
    assert type(info.metadata["t.yes"]) is bool
    assert type(info.metadata["t.u8"]) is int


def test_a_real_model_matches_the_gguf_packages_own_reader(tmp_path: Path) -> None:
    path = write_model(tmp_path / "tiny.gguf")
    info = read_file(path)
    reference = gguf.GGUFReader(path)
    assert info.version == 3
    assert info.tensor_count == len(reference.tensors) > 0
    assert (info.architecture, info.quantization) == ("llama", "F32")
    assert (info.name, info.context_length) == ("PAIR tiny test model", 2048)
    scalars = {
        key: field.contents()
        for key, field in reference.fields.items()
        if not key.startswith("GGUF.") and field.types[0] != gguf.GGUFValueType.ARRAY
    }
    assert info.metadata == scalars
    assert "tokenizer.ggml.tokens" not in info.metadata
    assert "tokenizer.chat_template" in info.metadata  # the last key, after the vocabulary


@pytest.mark.parametrize(
    "file_type", [t for t in gguf.LlamaFileType if t != gguf.LlamaFileType.GUESSED]
)
def test_file_types_carry_llama_cpps_names(tmp_path: Path, file_type: gguf.LlamaFileType) -> None:
    path = _write(tmp_path / "q.gguf", lambda writer: writer.add_file_type(file_type))
    expected = file_type.name.removeprefix("MOSTLY_").removeprefix("ALL_")
    if file_type.value in FILE_TYPES:
        assert read_file(path).quantization == expected
    else:
        assert read_file(path).quantization == f"type {file_type.value}"


def test_the_quantization_table_is_the_one_llama_cpp_uses() -> None:
    assert len(FILE_TYPES) == 33
    assert quantization_name(15) == "Q4_K_M"
    assert quantization_name(32) == "BF16"
    assert quantization_name(37) == "TQ2_0"
    assert quantization_name(4) == "type 4"  # retired (Q4_1 with F16 output)
    assert quantization_name(1000) == "type 1000"


def test_absent_or_mistyped_values_are_none(tmp_path: Path) -> None:
    def build(writer: gguf.GGUFWriter) -> None:
        writer.add_string("general.file_type", "Q4_K_M")
        writer.add_uint32("llama.context_length", 4096)  # not the file's architecture

    info = read_file(_write(tmp_path / "odd.gguf", build, arch="qwen2"))
    assert info.architecture == "qwen2"
    assert (info.name, info.quantization, info.context_length) == (None, None, None)
    assert info.metadata["general.file_type"] == "Q4_K_M"


def test_context_length_is_read_under_the_files_architecture(tmp_path: Path) -> None:
    def build(writer: gguf.GGUFWriter) -> None:
        writer.add_context_length(32768)
        writer.add_uint32("llama.context_length", 4096)

    info = read_file(_write(tmp_path / "qwen.gguf", build, arch="qwen2"))
    assert (info.architecture, info.context_length) == ("qwen2", 32768)


def test_version_2_is_read_and_version_1_refused(tmp_path: Path) -> None:
    data = bytearray(_write(tmp_path / "v.gguf", _mixed).read_bytes())
    data[4:8] = struct.pack("<I", 2)  # version 2 has version 3's layout in little-endian files
    assert read_info(io.BytesIO(bytes(data))).version == 2
    data[4:8] = struct.pack("<I", 1)
    with pytest.raises(GgufError, match="version 1 is not supported"):
        read_info(io.BytesIO(bytes(data)))


def test_big_endian_files_are_refused_by_name(tmp_path: Path) -> None:
    path = _write(tmp_path / "be.gguf", _mixed, endianess=gguf.GGUFEndian.BIG)
    with pytest.raises(GgufError, match="big-endian"):
        read_file(path)


# -- truncation ---------------------------------------------------------------------------------


def test_every_cut_of_the_metadata_raises(tmp_path: Path) -> None:
    data = _write(tmp_path / "mixed.gguf", _mixed).read_bytes()
    read_info(io.BytesIO(data))
    for cut in range(len(data)):
        with pytest.raises(GgufError):
            read_info(io.BytesIO(data[:cut]))


def test_cuts_through_a_real_models_vocabulary_raise(tmp_path: Path) -> None:
    data = write_model(tmp_path / "tiny.gguf").read_bytes()
    reference = gguf.GGUFReader(tmp_path / "tiny.gguf")
    last = list(reference.fields.values())[-1]
    metadata_end = last.offset + sum(part.nbytes for part in last.parts)
    read_info(io.BytesIO(data[:metadata_end]))  # the metadata alone is complete
    for cut in [*range(64), *range(64, metadata_end, 11), metadata_end - 1]:
        with pytest.raises(GgufError):
            read_info(io.BytesIO(data[:cut]))


def test_truncation_is_named(tmp_path: Path) -> None:
    data = _write(tmp_path / "mixed.gguf", _mixed).read_bytes()
    with pytest.raises(GgufError, match="truncated"):
        read_info(io.BytesIO(data[:-3]))


# -- hostile headers ----------------------------------------------------------------------------


def _header(kv_count: int, *, version: int = 3, tensor_count: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensor_count, kv_count)


def _key(key: str | bytes) -> bytes:
    raw = key.encode() if isinstance(key, str) else key
    return struct.pack("<Q", len(raw)) + raw


def _array(item_type: int, count: int) -> bytes:
    return struct.pack("<IIQ", 9, item_type, count)


class _Endless(io.RawIOBase):
    """A stream that starts with ``head`` and then yields zero bytes forever, counting reads."""

    def __init__(self, head: bytes) -> None:
        self._head = head
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        size = len(buffer)
        start = self.consumed
        chunk = self._head[start : start + size]
        buffer[: len(chunk)] = chunk
        buffer[len(chunk) : size] = bytes(size - len(chunk))
        self.consumed += size
        return size


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a GGUF file"),
        (b"<html><body>Not Found</body></html>", "not a GGUF file"),
        (b"GGML" + bytes(20), "not a GGUF file"),
        (_header(0, version=4), "version 4 is not supported"),
        (_header(2**64 - 1), "metadata entries"),
        (_header(1) + struct.pack("<Q", 2**63), "claims"),
        (_header(1) + _key(b"\xff\xfe") + struct.pack("<IB", 0, 1), "not UTF-8"),
        (_header(1) + _key("k") + struct.pack("<I", 13), "unknown value type 13"),
        (_header(1) + _key("k") + struct.pack("<IQ", 8, 2**40), "claims"),
        (_header(1) + _key("k") + _array(0, 2**40), "claims"),
        (_header(1) + _key("k") + _array(13, 1), "unknown item type 13"),
        (_header(1) + _key("k") + _array(9, 1) + struct.pack("<IQ", 9, 1) * 4, "deeper"),
        (_header(2) + (_key("k") + struct.pack("<IB", 0, 1)) * 2, "appears twice"),
    ],
    ids=[
        "empty",
        "html",
        "ggml",
        "version-4",
        "kv-count",
        "key-length",
        "key-not-utf8",
        "value-type",
        "string-length",
        "array-count",
        "array-item-type",
        "nesting",
        "duplicate-key",
    ],
)
def test_hostile_headers_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(GgufError, match=message):
        read_info(io.BytesIO(data))


def test_bounds_are_the_documented_ones() -> None:
    assert (MAX_KEY_BYTES, MAX_STRING_BYTES, MAX_ARRAY_ITEMS) == (2**16, 2**24, 10_000_000)
    just_over_key = _header(1) + struct.pack("<Q", MAX_KEY_BYTES + 1)
    with pytest.raises(GgufError, match=f"claims {MAX_KEY_BYTES + 1} bytes"):
        read_info(io.BytesIO(just_over_key))


def test_endless_metadata_stops_at_the_budget_without_reading_it() -> None:
    # Seven arrays of 10 million uint64 would be 560 MB: refused before any of it is read.
    head = _header(7) + _key("a") + _array(10, MAX_ARRAY_ITEMS)
    stream = _Endless(head)
    with pytest.raises(GgufError, match="larger than 64 MiB"):
        read_info(stream)  # type: ignore[arg-type]
    assert stream.consumed < 1024


def test_a_skipped_array_must_really_be_there() -> None:
    # An array's items are read past, not seeked past: a file that ends inside one is truncated.
    data = _header(1) + _key("a") + _array(4, 1000) + bytes(3999)
    with pytest.raises(GgufError, match="truncated"):
        read_info(io.BytesIO(data))
    assert read_info(io.BytesIO(data + b"\x00")).metadata == {}


def test_a_claimed_long_string_allocates_only_what_arrives(tmp_path: Path) -> None:
    path = tmp_path / "short.gguf"
    path.write_bytes(_header(1) + _key("k") + struct.pack("<IQ", 8, MAX_STRING_BYTES) + b"abc")
    tracemalloc.start()
    try:
        with pytest.raises(GgufError, match="truncated"):
            read_file(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024  # the claim is 16 MiB
