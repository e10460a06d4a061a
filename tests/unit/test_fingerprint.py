"""Fingerprints for people: the ``sha256:`` prefix dropped, the hex in groups of four."""

from __future__ import annotations

from app.fingerprint import SHORT_DIGITS, grouped

FINGERPRINT = "sha256:" + "0123456789abcdef" * 4


def test_the_whole_fingerprint_in_groups_of_four() -> None:
    assert grouped(FINGERPRINT) == " ".join(["0123 4567 89ab cdef"] * 4)
    assert grouped("0123456789") == "0123 4567 89"  # no prefix, a short last group


def test_only_the_first_digits_and_lines_of_groups() -> None:
    assert grouped(FINGERPRINT, digits=SHORT_DIGITS) == "0123 4567 89ab cdef"
    line = "0123 4567 89ab cdef 0123 4567 89ab cdef"
    assert grouped(FINGERPRINT, per_line=8) == f"{line}\n{line}"
    assert grouped(FINGERPRINT, digits=12, per_line=2) == "0123 4567\n89ab"


def test_nothing_stays_nothing() -> None:
    assert grouped("") == grouped("sha256:") == grouped("", digits=4, per_line=2) == ""
