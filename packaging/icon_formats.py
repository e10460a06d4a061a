"""The app icon for Windows (``.ico``) and macOS (``.icns``), from the PNGs ``icons.py`` renders.

Both containers are small enough to write by hand:

* ``.ico``: a 6-byte header, one 16-byte directory entry per image, then the images. Every
  image is a PNG (Windows Vista and later read PNG entries); a width or height byte of 0 means
  256 pixels, the largest an entry can describe.
* ``.icns``: ``icns`` and the file's length, then chunks of a 4-byte type, a length that counts
  the chunk's own 8-byte header, and the data, all big-endian. PNGs go into the chunk types an
  app bundle displays them from: ``ic07`` 128, ``ic08`` 256, ``ic09`` 512, ``ic10`` 1024
  (512@2x), ``ic11`` 32 (16@2x), ``ic12`` 64 (32@2x), ``ic13`` 256 (128@2x), ``ic14`` 512
  (256@2x). The 16 and 32 pixel images at 1x are 24-bit RGB chunks with 8-bit alpha masks
  (``is32``/``s8mk``, ``il32``/``l8mk``): macOS shows PNGs in ``icp4``/``icp5``/``icp6`` for a
  loose ``.icns`` file but not as an app's icon (``icp6`` is 48 px, not 64).

Usage: ``python packaging/icon_formats.py ico build/icons/pair.ico`` (or ``icns ...pair.icns``).
Like the other scripts here, this imports ``icons`` with ``packaging/`` on ``sys.path``, which
running it as a script does.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import icons
from PySide6.QtGui import QImage

Render = Callable[[int], bytes]

ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
ICO_MAX_SIZE = 256
# (chunk type, pixels) of the PNG chunks, smallest first.
ICNS_PNG_CHUNKS = (
    (b"ic11", 32),
    (b"ic12", 64),
    (b"ic07", 128),
    (b"ic13", 256),
    (b"ic08", 256),
    (b"ic14", 512),
    (b"ic09", 512),
    (b"ic10", 1024),
)
# (RGB chunk type, mask chunk type, pixels) of the 1x images below 128 px.
ICNS_RGB_CHUNKS = ((b"is32", b"s8mk", 16), (b"il32", b"l8mk", 32))
ICNS_HEADER_SIZE = 8
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The longest literal and the longest repeat one byte of the icns run-length code describes.
_RLE_MAX_LITERAL = 128
_RLE_MAX_REPEAT = 130
_RLE_MIN_REPEAT = 3


def ico_bytes(images: Sequence[tuple[int, bytes]]) -> bytes:
    """An ``.ico`` file holding ``(size, png)`` images, in that order."""
    if not images:
        raise ValueError("an icon needs at least one image")
    header = struct.pack("<HHH", 0, 1, len(images))  # reserved, type 1 = icon, count
    offset = len(header) + 16 * len(images)
    entries = []
    for size, png in images:
        if not 1 <= size <= ICO_MAX_SIZE:
            raise ValueError(f"an .ico entry is 1 to {ICO_MAX_SIZE} px, not {size}")
        _check_png(png)
        side = 0 if size == ICO_MAX_SIZE else size
        # width, height, palette colours (0: none), reserved, colour planes, bits per pixel,
        # bytes of image data, offset of the image data from the start of the file
        entries.append(struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(png), offset))
        offset += len(png)
    return header + b"".join(entries) + b"".join(png for _size, png in images)


def icns_bytes(render: Render) -> bytes:
    """An ``.icns`` file with every chunk described above, drawn by ``render(size) -> png``."""
    pngs: dict[int, bytes] = {}

    def png(size: int) -> bytes:
        if size not in pngs:
            pngs[size] = _check_png(render(size))
        return pngs[size]

    chunks: list[tuple[bytes, bytes]] = []
    for rgb_type, mask_type, size in ICNS_RGB_CHUNKS:
        rgb, mask = rgb_and_mask(png(size), size)
        chunks += [(rgb_type, rgb), (mask_type, mask)]
    chunks += [(kind, png(size)) for kind, size in ICNS_PNG_CHUNKS]
    body = b"".join(
        kind + struct.pack(">I", ICNS_HEADER_SIZE + len(data)) + data for kind, data in chunks
    )
    return b"icns" + struct.pack(">I", ICNS_HEADER_SIZE + len(body)) + body


def rgb_and_mask(png: bytes, size: int) -> tuple[bytes, bytes]:
    """An ``is32``/``il32`` chunk's data and its ``s8mk``/``l8mk`` mask, from a square PNG.

    The RGB data is each channel (red, then green, then blue) run-length coded on its own, plus
    one zero byte: Apple silicon Macs drop the last value of that code in app icons, and a
    trailing byte is ignored everywhere else. The mask is the alpha channel, one byte a pixel.
    """
    image = QImage.fromData(png)
    if image.isNull() or image.width() != size or image.height() != size:
        raise ValueError(f"expected a {size} x {size} PNG")
    image = image.convertToFormat(QImage.Format.Format_ARGB32)  # straight (not premultiplied)
    argb = [image.pixel(x, y) for y in range(size) for x in range(size)]
    red = bytes((pixel >> 16) & 0xFF for pixel in argb)
    green = bytes((pixel >> 8) & 0xFF for pixel in argb)
    blue = bytes(pixel & 0xFF for pixel in argb)
    alpha = bytes((pixel >> 24) & 0xFF for pixel in argb)
    return icns_rle(red) + icns_rle(green) + icns_rle(blue) + b"\x00", alpha


def icns_rle(data: bytes) -> bytes:
    """The icns run-length code: ``n`` < 128 then ``n + 1`` literal bytes, or ``n`` >= 128 then
    one byte repeated ``n - 125`` times (3 to 130)."""
    out = bytearray()
    i = 0
    while i < len(data):
        repeat = 1
        while i + repeat < len(data) and repeat < _RLE_MAX_REPEAT and data[i + repeat] == data[i]:
            repeat += 1
        if repeat >= _RLE_MIN_REPEAT:
            out += bytes((0x80 + repeat - _RLE_MIN_REPEAT, data[i]))
            i += repeat
            continue
        start = i
        while i < len(data) and i - start < _RLE_MAX_LITERAL:
            if data[i : i + _RLE_MIN_REPEAT] == bytes([data[i]]) * _RLE_MIN_REPEAT:
                break
            i += 1
        out.append(i - start - 1)
        out += data[start:i]
    return bytes(out)


def write_ico(path: Path, sizes: Iterable[int] = ICO_SIZES, render: Render | None = None) -> Path:
    """Write the Windows icon with one PNG entry per size (16 to 256 px)."""
    draw = icons.render_png if render is None else render
    ordered = sorted(set(sizes))
    return _write(path, ico_bytes([(size, draw(size)) for size in ordered]))


def write_icns(path: Path, render: Render | None = None) -> Path:
    """Write the macOS icon (16 to 1024 px)."""
    return _write(path, icns_bytes(icons.render_png if render is None else render))


def _check_png(data: bytes) -> bytes:
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError("the renderer did not return a PNG")
    return data


def _write(path: Path, contents: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(contents)
    return path


def main(argv: list[str] | None = None) -> int:
    """Write the icon named on the command line."""
    parser = argparse.ArgumentParser(description="Write PAIR's .ico or .icns icon.")
    parser.add_argument("format", choices=("ico", "icns"))
    parser.add_argument("path", type=Path, help="the file to write")
    options = parser.parse_args(argv)
    writer = write_ico if options.format == "ico" else write_icns
    print(writer(options.path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
