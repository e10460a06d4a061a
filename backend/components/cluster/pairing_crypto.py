"""What PAIR builds on CPace: the channel identifier, session keys, sealed boxes and the PIN.

Roles follow the pairing design: the inviter (A) shows the PIN and is the CPace responder; the
joiner (B) types it and is the CPace initiator. ``k_ab`` seals what A sends to B, ``k_ba``
what B sends to A.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import re
import secrets
from collections.abc import Callable
from typing import NamedTuple

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from backend.components.cluster.pake import lv_cat

CHANNEL_LABEL = b"pair-pairing-v1"
CLUSTER_TAG_LABEL = b"pair-cluster-tag-v1"
KEY_BYTES = 32
PIN_DIGITS = 6
_INFO_INVITER_TO_JOINER = b"pair-pairing-v1 k_ab inviter to joiner"
_INFO_JOINER_TO_INVITER = b"pair-pairing-v1 k_ba joiner to inviter"
# Each key seals exactly one box, so a fixed nonce never repeats under a key: the two
# directions have distinct keys, and a fresh ISK (fresh scalars, fresh sid) gives fresh keys
# for every run. Sending the nonce would add bytes and nothing else.
_NONCE = bytes(12)
_PIN_PATTERN = re.compile(r"[0-9]{6}")


class BoxError(ValueError):
    """A sealed box did not open: wrong key, wrong associated data, or altered bytes."""


class SessionKeys(NamedTuple):
    """The two one-use keys derived from a confirmed ISK."""

    k_ab: bytes  # inviter (A, CPace responder) to joiner (B, CPace initiator)
    k_ba: bytes  # joiner (B) to inviter (A)


def channel_identifier(invite_id: bytes, inviter_cert_der: bytes, joiner_fingerprint: str) -> bytes:
    """CPace's CI: the protocol label, the invite, the inviter certificate's SHA-256 and the
    joiner's certificate fingerprint (``sha256:…``)."""
    # The joiner hashes the certificate it saw in TLS, the inviter its own: a TLS man in the
    # middle shows a different certificate, so the two sides derive different generators. The
    # inviter puts in the fingerprint of the certificate it invited (the one TLS presented to
    # it), the joiner its own: a joiner other than the invited computer cannot confirm either.
    return lv_cat(
        CHANNEL_LABEL,
        invite_id,
        hashlib.sha256(inviter_cert_der).digest(),
        joiner_fingerprint.encode("ascii"),
    )


def cluster_tag(cluster_id: str, invite_id: bytes, inviter_cert_der: bytes) -> str:
    """Hex HMAC-SHA256 keyed by ``cluster_id`` over the invite and the inviter's certificate.

    An invite carries this instead of the cluster id, which only the sealed box reveals: a
    member of the same cluster can recognise it, anyone else learns nothing, and it cannot be
    replayed from another certificate (the joiner pins the one in the invite).
    """
    message = lv_cat(CLUSTER_TAG_LABEL, invite_id, hashlib.sha256(inviter_cert_der).digest())
    return hmac.new(cluster_id.encode(), message, hashlib.sha256).hexdigest()


def session_keys(isk: bytes) -> SessionKeys:
    """``k_ab`` and ``k_ba`` by HKDF-SHA512 of the ISK, one info label per direction."""
    return SessionKeys(
        k_ab=_derive_key(isk, _INFO_INVITER_TO_JOINER),
        k_ba=_derive_key(isk, _INFO_JOINER_TO_INVITER),
    )


def _derive_key(isk: bytes, info: bytes) -> bytes:
    # No salt: the ISK is already a uniformly distributed SHA-512 output (RFC 5869 §3.1).
    return HKDF(algorithm=hashes.SHA512(), length=KEY_BYTES, salt=None, info=info).derive(isk)


def seal(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """``plaintext`` encrypted and authenticated with ChaCha20-Poly1305, binding ``aad``."""
    return ChaCha20Poly1305(key).encrypt(_NONCE, plaintext, aad)


def open_box(key: bytes, box: bytes, aad: bytes) -> bytes:
    """The plaintext of a box made by ``seal``; raise ``BoxError`` when it does not open."""
    try:
        return ChaCha20Poly1305(key).decrypt(_NONCE, box, aad)
    except InvalidTag:
        raise BoxError("the box does not open with this key and associated data") from None


def validate_pin(text: str) -> str:
    """``text`` if it is exactly six ASCII digits; raise ``ValueError`` otherwise."""
    # fullmatch, not "^...$": "$" also matches before a trailing newline. [0-9] excludes other
    # Unicode digits such as full-width ones. The message never repeats the input.
    if not isinstance(text, str) or _PIN_PATTERN.fullmatch(text) is None:
        raise ValueError(f"a PIN is exactly {PIN_DIGITS} digits 0-9")
    return text


def password_related_string(pin: str) -> bytes:
    """CPace's PRS for ``pin``: its six ASCII digits, after validation."""
    return validate_pin(pin).encode("ascii")


def is_trivial_pin(pin: str) -> bool:
    """Whether ``pin`` is all one digit or a straight run up or down (123456, 654321)."""
    steps = {int(after) - int(before) for before, after in itertools.pairwise(pin)}
    return steps in ({0}, {1}, {-1})


def new_pin(randbelow: Callable[[int], int] = secrets.randbelow) -> str:
    """A fresh random six-digit PIN, drawn again while it is trivial (as HAP and Matter do)."""
    while True:
        pin = validate_pin(f"{randbelow(10**PIN_DIGITS):0{PIN_DIGITS}d}")
        if not is_trivial_pin(pin):
            return pin
