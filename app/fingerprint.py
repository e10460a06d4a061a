"""Certificate fingerprints for people to read and compare: hex digits in groups of four."""

from __future__ import annotations

GROUP = 4
SHORT_DIGITS = 16  # as `pair cluster` and `pair invite` shorten it


def grouped(fingerprint: str, *, digits: int | None = None, per_line: int | None = None) -> str:
    """``sha256:3f2a9c01…`` as ``3f2a 9c01 …``: the prefix dropped, the hex in groups of four;
    only the first ``digits`` hex digits when given, and ``per_line`` groups to a line when
    given. ``""`` stays ``""``."""
    hex_digits = fingerprint.removeprefix("sha256:")[:digits]
    groups = [hex_digits[i : i + GROUP] for i in range(0, len(hex_digits), GROUP)]
    width = per_line or len(groups) or 1
    return "\n".join(" ".join(groups[i : i + width]) for i in range(0, len(groups), width))
