"""The .ico and .icns files written by packaging/icon_formats.py, parsed back with parsers written
here from the formats' descriptions (not from the writer's code)."""

from __future__ import annotations

import importlib
import struct
import sys
from pathlib import Path
from types import ModuleType

import pytest
from PySide6.QtGui import QImage

PACKAGING = Path(__file__).resolve().parents[2] / "packaging"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _packaging_module(name: str) -> ModuleType:
    """A script module of packaging/ (a folder of scripts: ``packaging`` is pip's library)."""
    if str(PACKAGING) not in sys.path:
        sys.path.insert(0, str(PACKAGING))
    return importlib.import_module(name)


icon_formats = _packaging_module("icon_formats")
icons = _packaging_module("icons")


def _png_size(blob: bytes) -> tuple[int, int]:
    """The size Qt reads from a PNG blob (and that it is a PNG at all)."""
    assert blob.startswith(PNG_SIGNATURE)
    image = QImage.fromData(blob)
    assert not image.isNull()
    return image.width(), image.height()


def _png_ihdr(blob: bytes) -> tuple[int, int, int, int]:
    """Width, height, bit depth and colour type from the IHDR chunk, which comes first."""
    length, kind = struct.unpack(">I4s", blob[8:16])
    assert kind == b"IHDR"
    assert length == 13
    width, height, depth, colour = struct.unpack(">IIBB", blob[16:26])
    return width, height, depth, colour


def _parse_ico(data: bytes) -> list[tuple[int, int, bytes]]:
    """``(width, height, png)`` per directory entry, checking every header field on the way."""
    reserved, kind, count = struct.unpack("<HHH", data[:6])
    assert (reserved, kind) == (0, 1)
    entries = []
    expected_offset = 6 + 16 * count
    for index in range(count):
        width, height, colours, zero, planes, bits, size, offset = struct.unpack(
            "<BBBBHHII", data[6 + 16 * index : 6 + 16 * (index + 1)]
        )
        assert (colours, zero, planes, bits) == (0, 0, 1, 32)
        assert offset == expected_offset, "images follow the directory, in its order"
        expected_offset += size
        entries.append((width or 256, height or 256, data[offset : offset + size]))
    assert expected_offset == len(data), "nothing after the last image"
    return entries


def _parse_icns(data: bytes) -> list[tuple[bytes, bytes]]:
    """``(type, data)`` per chunk, checking the file and chunk lengths."""
    magic, total = struct.unpack(">4sI", data[:8])
    assert magic == b"icns"
    assert total == len(data)
    chunks = []
    position = 8
    while position < len(data):
        kind, length = struct.unpack(">4sI", data[position : position + 8])
        assert length > 8
        assert position + length <= len(data)
        chunks.append((kind, data[position + 8 : position + length]))
        position += length
    assert position == len(data)
    return chunks


def _unpack_icns_rle(data: bytes, count: int) -> tuple[bytes, int]:
    """Decode ``count`` bytes of the icns run-length code; returns them and the bytes read."""
    out = bytearray()
    position = 0
    while len(out) < count:
        control = data[position]
        if control < 0x80:
            out += data[position + 1 : position + 2 + control]
            position += 2 + control
        else:
            out += bytes([data[position + 1]]) * (control - 125)
            position += 2
    assert len(out) == count, "a run crosses the end of a channel"
    return bytes(out), position


def _argb(png: bytes) -> list[int]:
    image = QImage.fromData(png).convertToFormat(QImage.Format.Format_ARGB32)
    return [image.pixel(x, y) for y in range(image.height()) for x in range(image.width())]


def test_the_ico_holds_one_rgba_png_per_size_in_its_directory(tmp_path: Path) -> None:
    path = icon_formats.write_ico(tmp_path / "out" / "pair.ico")

    entries = _parse_ico(path.read_bytes())
    assert [width for width, _height, _png in entries] == [16, 24, 32, 48, 64, 128, 256]
    for width, height, png in entries:
        assert width == height
        assert _png_size(png) == (width, height)
        # Windows reads PNG entries that are 8-bit RGBA (colour type 6) only.
        assert _png_ihdr(png) == (width, height, 8, 6)


def test_the_ico_takes_other_sizes_sorted_once_each_up_to_256(tmp_path: Path) -> None:
    path = icon_formats.write_ico(tmp_path / "small.ico", sizes=(48, 16, 16))
    assert [width for width, _h, _p in _parse_ico(path.read_bytes())] == [16, 48]

    with pytest.raises(ValueError, match="1 to 256"):
        icon_formats.write_ico(tmp_path / "big.ico", sizes=(512,))
    assert not (tmp_path / "big.ico").exists()


def test_the_icns_holds_pngs_at_every_size_an_app_bundle_shows(tmp_path: Path) -> None:
    path = icon_formats.write_icns(tmp_path / "pair.icns")

    chunks = _parse_icns(path.read_bytes())
    types = [kind for kind, _data in chunks]
    assert types == [
        b"is32",
        b"s8mk",
        b"il32",
        b"l8mk",
        b"ic11",
        b"ic12",
        b"ic07",
        b"ic13",
        b"ic08",
        b"ic14",
        b"ic09",
        b"ic10",
    ]
    png_sizes = {
        b"ic11": 32,
        b"ic12": 64,
        b"ic07": 128,
        b"ic13": 256,
        b"ic08": 256,
        b"ic14": 512,
        b"ic09": 512,
        b"ic10": 1024,
    }
    for kind, data in chunks:
        if kind in png_sizes:
            assert _png_size(data) == (png_sizes[kind], png_sizes[kind]), kind


@pytest.mark.parametrize(
    ("rgb_type", "mask_type", "size"), [("is32", "s8mk", 16), ("il32", "l8mk", 32)]
)
def test_the_small_icns_images_are_run_length_rgb_with_an_alpha_mask(
    tmp_path: Path, rgb_type: str, mask_type: str, size: int
) -> None:
    chunks = dict(_parse_icns(icon_formats.write_icns(tmp_path / "pair.icns").read_bytes()))
    rgb, mask = chunks[rgb_type.encode()], chunks[mask_type.encode()]

    channels = []
    position = 0
    for _channel in "rgb":
        values, used = _unpack_icns_rle(rgb[position:], size * size)
        channels.append(values)
        position += used
    assert rgb[position:] in (b"", b"\x00"), "at most the one padding byte after blue"
    assert len(mask) == size * size

    expected = _argb(icons.render_png(size))
    decoded = [
        (alpha << 24) | (red << 16) | (green << 8) | blue
        for red, green, blue, alpha in zip(*channels, mask, strict=True)
    ]
    assert decoded == expected
    assert any(pixel >> 24 == 0 for pixel in expected), "the icon's corners are transparent"
    assert any(pixel >> 24 == 0xFF for pixel in expected)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x07",
        b"ab",
        b"aaa",
        b"\x00" * 130,
        b"\x00" * 131,
        b"\x01" * 1000,
        bytes(range(256)),
        b"abcaaab" * 50,
        bytes((index * 7) % 5 for index in range(997)),
    ],
)
def test_the_icns_run_length_code_decodes_to_its_input(data: bytes) -> None:
    packed = icon_formats.icns_rle(data)

    assert _unpack_icns_rle(packed, len(data)) == (data, len(packed))
    if len(data) >= 3 and len(set(data)) == 1:
        assert len(packed) <= 2 * -(-len(data) // 130), "repeats are coded as runs"


def test_the_command_line_writes_either_format(tmp_path: Path) -> None:
    assert icon_formats.main(["ico", str(tmp_path / "a.ico")]) == 0
    assert icon_formats.main(["icns", str(tmp_path / "a.icns")]) == 0

    assert _parse_ico((tmp_path / "a.ico").read_bytes())
    assert _parse_icns((tmp_path / "a.icns").read_bytes())


def test_a_renderer_that_returns_no_png_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="PNG"):
        icon_formats.write_ico(tmp_path / "x.ico", sizes=(16,), render=lambda size: b"GIF89a")
    with pytest.raises(ValueError, match="PNG"):
        icon_formats.write_icns(tmp_path / "x.icns", render=lambda size: b"GIF89a")
