"""PAIR's layer on CPace: channel binding to the inviter's certificate, keys, boxes, PINs."""

from __future__ import annotations

import hashlib
import secrets

import pytest

from backend.components.cluster.pairing_crypto import (
    CHANNEL_LABEL,
    KEY_BYTES,
    BoxError,
    SessionKeys,
    channel_identifier,
    is_trivial_pin,
    new_pin,
    open_box,
    password_related_string,
    seal,
    session_keys,
    validate_pin,
)
from backend.components.cluster.pake import CPaceRun, Role, lv_cat

INVITE_ID = bytes.fromhex("0011223344556677")
INVITER_CERT = b"inviter certificate DER (opaque bytes to this layer)"
MITM_CERT = b"a man in the middle's certificate DER"
SID = bytes(range(16))
AD_JOINER = b"joiner node id, name, SPKI hash"
AD_INVITER = b"inviter node id, name"
JOINER_FINGERPRINT = "sha256:" + "ab" * 32
OTHER_FINGERPRINT = "sha256:" + "cd" * 32


def _pair(
    joiner_pin: str,
    inviter_pin: str,
    cert_seen_by_joiner: bytes,
    joiner_fingerprint: str = JOINER_FINGERPRINT,
) -> tuple[CPaceRun, CPaceRun, bool, bool]:
    """A pairing run: the joiner is the CPace initiator, the inviter the responder (which
    invited the computer with ``JOINER_FINGERPRINT``)."""
    joiner = CPaceRun(
        Role.INITIATOR,
        password_related_string(joiner_pin),
        channel_identifier(INVITE_ID, cert_seen_by_joiner, joiner_fingerprint),
        SID,
        AD_JOINER,
    )
    inviter = CPaceRun(
        Role.RESPONDER,
        password_related_string(inviter_pin),
        channel_identifier(INVITE_ID, INVITER_CERT, JOINER_FINGERPRINT),
        SID,
        AD_INVITER,
    )
    inviter.receive(joiner.share, AD_JOINER)
    joiner.receive(inviter.share, AD_INVITER)
    joiner_tag, inviter_tag = joiner.tag(), inviter.tag()
    return joiner, inviter, inviter.verify(joiner_tag), joiner.verify(inviter_tag)


def test_channel_identifier_binds_label_invite_and_both_certificates() -> None:
    expected = lv_cat(
        CHANNEL_LABEL,
        INVITE_ID,
        hashlib.sha256(INVITER_CERT).digest(),
        JOINER_FINGERPRINT.encode(),
    )
    assert channel_identifier(INVITE_ID, INVITER_CERT, JOINER_FINGERPRINT) == expected
    assert channel_identifier(INVITE_ID, MITM_CERT, JOINER_FINGERPRINT) != expected
    assert channel_identifier(bytes(8), INVITER_CERT, JOINER_FINGERPRINT) != expected
    assert channel_identifier(INVITE_ID, INVITER_CERT, OTHER_FINGERPRINT) != expected


def test_a_joiner_other_than_the_invited_computer_fails_both_confirmations() -> None:
    _, _, inviter_confirmed, joiner_confirmed = _pair(
        "483920", "483920", INVITER_CERT, OTHER_FINGERPRINT
    )
    assert not inviter_confirmed and not joiner_confirmed


def test_the_right_pin_pairs_and_both_sides_hold_the_same_keys() -> None:
    joiner, inviter, inviter_confirmed, joiner_confirmed = _pair("483920", "483920", INVITER_CERT)
    assert inviter_confirmed
    assert joiner_confirmed
    assert session_keys(joiner.isk) == session_keys(inviter.isk)
    keys = session_keys(inviter.isk)
    box = seal(keys.k_ab, INVITER_CERT, b"M4")
    assert open_box(session_keys(joiner.isk).k_ab, box, b"M4") == INVITER_CERT


def test_a_wrong_pin_fails_on_both_sides() -> None:
    _, _, inviter_confirmed, joiner_confirmed = _pair("483921", "483920", INVITER_CERT)
    assert not inviter_confirmed
    assert not joiner_confirmed


def test_a_tls_man_in_the_middle_fails_even_with_the_right_pin() -> None:
    # The joiner saw the attacker's certificate in TLS, so its CI differs from the inviter's.
    _, _, inviter_confirmed, joiner_confirmed = _pair("483920", "483920", MITM_CERT)
    assert not inviter_confirmed
    assert not joiner_confirmed


def test_session_keys_are_distinct_per_direction_and_per_isk() -> None:
    isk = secrets.token_bytes(64)
    keys = session_keys(isk)
    assert isinstance(keys, SessionKeys)
    assert len(keys.k_ab) == len(keys.k_ba) == KEY_BYTES
    assert keys.k_ab != keys.k_ba
    assert session_keys(isk) == keys
    assert set(session_keys(secrets.token_bytes(64))).isdisjoint(keys)


class TestBoxes:
    """A box opens only with its key and its associated data, and only unaltered."""

    keys = session_keys(bytes(64))
    plaintext = b"certificate DER, node id, roster digest"

    def test_round_trip(self) -> None:
        box = seal(self.keys.k_ab, self.plaintext, b"aad")
        assert open_box(self.keys.k_ab, box, b"aad") == self.plaintext
        assert self.plaintext not in box

    def test_the_other_direction_key_does_not_open_it(self) -> None:
        box = seal(self.keys.k_ab, self.plaintext, b"aad")
        with pytest.raises(BoxError):
            open_box(self.keys.k_ba, box, b"aad")

    def test_other_associated_data_does_not_open_it(self) -> None:
        box = seal(self.keys.k_ab, self.plaintext, b"aad")
        with pytest.raises(BoxError):
            open_box(self.keys.k_ab, box, b"aae")

    @pytest.mark.parametrize("position", [0, 10, -1])
    def test_an_altered_box_does_not_open(self, position: int) -> None:
        box = bytearray(seal(self.keys.k_ab, self.plaintext, b"aad"))
        box[position] ^= 0x01
        with pytest.raises(BoxError):
            open_box(self.keys.k_ab, bytes(box), b"aad")

    def test_a_truncated_box_does_not_open(self) -> None:
        box = seal(self.keys.k_ab, self.plaintext, b"aad")
        with pytest.raises(BoxError):
            open_box(self.keys.k_ab, box[:-1], b"aad")


@pytest.mark.parametrize("pin", ["000000", "483920", "999998"])
def test_validate_pin_accepts_six_ascii_digits(pin: str) -> None:
    assert validate_pin(pin) == pin
    assert password_related_string(pin) == pin.encode("ascii")


@pytest.mark.parametrize(
    "text",
    [
        "12345",
        "1234567",
        "12a456",
        " 123456",
        "123456 ",
        "123456\n",
        "１２３４５６",  # full-width digits: str.isdigit() would accept them
        "١٢٣٤٥٦",  # Arabic-Indic digits
        "123 456",
        "-12345",
        "",
    ],
)
def test_validate_pin_refuses_anything_else_without_echoing_it(text: str) -> None:
    # One fixed message for every input (anchored match), so nothing typed reaches a log.
    with pytest.raises(ValueError, match=r"^a PIN is exactly 6 digits 0-9$"):
        validate_pin(text)


TRIVIAL = [
    *(str(digit) * 6 for digit in range(10)),
    *("0123456789"[start : start + 6] for start in range(5)),
    *("9876543210"[start : start + 6] for start in range(5)),
]


@pytest.mark.parametrize("pin", TRIVIAL)
def test_trivial_pins_are_recognised(pin: str) -> None:
    assert is_trivial_pin(pin)


@pytest.mark.parametrize("pin", ["483920", "123457", "112233", "135791", "890123", "000001"])
def test_other_pins_are_not_trivial(pin: str) -> None:
    assert not is_trivial_pin(pin)


def test_new_pin_redraws_every_trivial_pin_and_zero_pads() -> None:
    script = [int(pin) for pin in TRIVIAL] + [42]
    calls: list[int] = []
    values = iter(script)

    def randbelow(bound: int) -> int:
        calls.append(bound)
        return next(values)

    assert new_pin(randbelow) == "000042"
    assert calls == [10**6] * len(script)


def test_new_pin_from_the_system_source_is_valid_and_never_trivial() -> None:
    for _ in range(500):
        pin = new_pin()
        assert validate_pin(pin) == pin
        assert not is_trivial_pin(pin)
