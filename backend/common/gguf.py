"""A strict, bounded reader of a GGUF file's metadata (llama.cpp's model format).

Only the header and its key/value pairs are read, never tensor data. Every length and count is
checked against a bound before anything is read or allocated, so a hostile or truncated file
raises ``GgufError`` instead of hanging or filling memory. Arrays (tokenizer vocabularies) are
skipped without being kept; the scalar values are returned.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TypeVar

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)

MAX_METADATA_BYTES = 64 * 1024 * 1024
MAX_KEY_BYTES = 64 * 1024
MAX_STRING_BYTES = 16 * 1024 * 1024
MAX_ARRAY_ITEMS = 10_000_000
MAX_ARRAY_DEPTH = 3
_READ_CHUNK = 1024 * 1024  # reads grow with the data that arrives, not with a claimed length

Scalar = str | int | float | bool
_T = TypeVar("_T")

# llama.cpp's ``llama_ftype`` numbers (``general.file_type``) and the names its tools print.
FILE_TYPES: Mapping[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
    38: "MXFP4_MOE",
}  # fmt: skip

# GGUF value types: the fixed-size ones by their struct format; 8 is a string, 9 an array.
_STRING, _ARRAY, _BOOL = 8, 9, 7
_FIXED: Mapping[int, struct.Struct] = {
    0: struct.Struct("<B"), 1: struct.Struct("<b"), 2: struct.Struct("<H"),
    3: struct.Struct("<h"), 4: struct.Struct("<I"), 5: struct.Struct("<i"),
    6: struct.Struct("<f"), 7: struct.Struct("<B"), 10: struct.Struct("<Q"),
    11: struct.Struct("<q"), 12: struct.Struct("<d"),
}  # fmt: skip
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
# The smallest key/value pair: an empty key's length, a value type and a one-byte value.
_SMALLEST_PAIR = _U64.size + _U32.size + 1


class GgufError(Exception):
    """The file is not a GGUF file PAIR can read; ``message`` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class GgufInfo:
    """What a GGUF header says; the named values are ``None`` when absent or of the wrong type."""

    version: int
    tensor_count: int
    architecture: str | None
    name: str | None
    quantization: str | None
    context_length: int | None
    metadata: Mapping[str, Scalar] = field(hash=False)


def quantization_name(file_type: int) -> str:
    """llama.cpp's name for a ``general.file_type`` number (``type N`` for unknown ones)."""
    return FILE_TYPES.get(file_type, f"type {file_type}")


def read_file(path: Path) -> GgufInfo:
    """The metadata of the GGUF file at ``path`` (blocking: run it in a thread)."""
    with path.open("rb") as handle:
        return read_info(handle)


def read_info(handle: BinaryIO) -> GgufInfo:
    """The metadata at the start of ``handle``, an open binary file positioned at its start."""
    reader = _Reader(handle)
    try:
        magic = reader.read(len(MAGIC), "the magic number")
    except GgufError:
        raise GgufError("not a GGUF file (it is shorter than the GGUF magic number)") from None
    if magic != MAGIC:
        raise GgufError("not a GGUF file (it does not start with the GGUF magic number)")
    version = reader.u32("the version")
    if version not in SUPPORTED_VERSIONS:
        raise GgufError(_version_problem(version))
    tensor_count = reader.u64("the tensor count")
    kv_count = reader.u64("the metadata count")
    if kv_count > MAX_METADATA_BYTES // _SMALLEST_PAIR:
        raise GgufError(f"the header claims {kv_count} metadata entries, more than fit in 64 MiB")
    metadata = _read_pairs(reader, kv_count)
    return _info(version, tensor_count, metadata)


def _version_problem(version: int) -> str:
    swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
    if swapped in SUPPORTED_VERSIONS:
        return f"GGUF version {swapped} is big-endian; only little-endian files are supported"
    return f"GGUF version {version} is not supported (only versions 2 and 3)"


def _read_pairs(reader: _Reader, count: int) -> dict[str, Scalar]:
    metadata: dict[str, Scalar] = {}
    seen: set[str] = set()
    for index in range(count):
        key = reader.key(index)
        if key in seen:
            raise GgufError(f"the metadata key {key!r} appears twice")
        seen.add(key)
        value_type = reader.u32(f"the type of {key!r}")
        if value_type == _ARRAY:
            _skip_array(reader, key, depth=1)
        else:
            metadata[key] = _read_scalar(reader, key, value_type)
    return metadata


def _read_scalar(reader: _Reader, key: str, value_type: int) -> Scalar:
    if value_type == _STRING:
        return reader.string(key)
    layout = _FIXED.get(value_type)
    if layout is None:
        raise GgufError(f"the metadata {key!r} has an unknown value type {value_type}")
    value: int | float = layout.unpack(reader.read(layout.size, f"the value of {key!r}"))[0]
    return bool(value) if value_type == _BOOL else value


def _skip_array(reader: _Reader, key: str, *, depth: int) -> None:
    if depth > MAX_ARRAY_DEPTH:
        raise GgufError(f"the metadata {key!r} nests arrays deeper than {MAX_ARRAY_DEPTH}")
    item_type = reader.u32(f"the item type of {key!r}")
    count = reader.u64(f"the length of {key!r}")
    if count > MAX_ARRAY_ITEMS:
        raise GgufError(f"the array {key!r} claims {count} items (at most {MAX_ARRAY_ITEMS})")
    layout = _FIXED.get(item_type)
    if layout is not None:
        reader.skip(count * layout.size, f"the items of {key!r}")
    elif item_type == _STRING:
        for _ in range(count):
            reader.skip(reader.length(MAX_STRING_BYTES, f"a string in {key!r}"), key)
    elif item_type == _ARRAY:
        for _ in range(count):
            _skip_array(reader, key, depth=depth + 1)
    else:
        raise GgufError(f"the array {key!r} has an unknown item type {item_type}")


def _info(version: int, tensor_count: int, metadata: dict[str, Scalar]) -> GgufInfo:
    architecture = _typed(metadata.get("general.architecture"), str)
    file_type = _typed(metadata.get("general.file_type"), int)
    context = None if architecture is None else metadata.get(f"{architecture}.context_length")
    return GgufInfo(
        version=version,
        tensor_count=tensor_count,
        architecture=architecture,
        name=_typed(metadata.get("general.name"), str),
        quantization=None if file_type is None else quantization_name(file_type),
        context_length=_typed(context, int),
        metadata=metadata,
    )


def _typed(value: Scalar | None, kind: type[_T]) -> _T | None:
    # bool is an int to Python, never to GGUF.
    if isinstance(value, kind) and not isinstance(value, bool):
        return value
    return None


class _Reader:
    """Reads exact byte counts from a handle within the metadata budget."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self._used = 0

    def read(self, size: int, what: str) -> bytes:
        """Exactly ``size`` bytes, or a ``GgufError`` naming ``what`` was cut short."""
        self._spend(size, what)
        parts: list[bytes] = []
        remaining = size
        while remaining:
            part = self._handle.read(min(remaining, _READ_CHUNK))
            if not part:
                raise GgufError(f"the file ends inside {what} (it is truncated)")
            parts.append(part)
            remaining -= len(part)
        return b"".join(parts)

    def skip(self, size: int, what: str) -> None:
        """Read past ``size`` bytes without keeping them (reading proves they are there)."""
        self._spend(size, what)
        remaining = size
        while remaining:
            part = self._handle.read(min(remaining, _READ_CHUNK))
            if not part:
                raise GgufError(f"the file ends inside {what} (it is truncated)")
            remaining -= len(part)

    def u32(self, what: str) -> int:
        """A little-endian uint32."""
        value: int = _U32.unpack(self.read(_U32.size, what))[0]
        return value

    def u64(self, what: str) -> int:
        """A little-endian uint64."""
        value: int = _U64.unpack(self.read(_U64.size, what))[0]
        return value

    def length(self, bound: int, what: str) -> int:
        """A string's uint64 length, refused above ``bound``."""
        size = self.u64(f"the length of {what}")
        if size > bound:
            raise GgufError(f"{what} claims {size} bytes (at most {bound})")
        return size

    def key(self, index: int) -> str:
        """A metadata key: UTF-8, within ``MAX_KEY_BYTES``."""
        what = f"metadata key {index}"
        raw = self.read(self.length(MAX_KEY_BYTES, what), what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GgufError(f"{what} is not UTF-8: {raw[:40]!r}") from None

    def string(self, key: str) -> str:
        """A string value; bytes that are not UTF-8 are replaced rather than refused."""
        what = f"the value of {key!r}"
        return self.read(self.length(MAX_STRING_BYTES, what), what).decode("utf-8", "replace")

    def _spend(self, size: int, what: str) -> None:
        self._used += size
        if self._used > MAX_METADATA_BYTES:
            raise GgufError(f"the metadata is larger than 64 MiB (at {what})")
