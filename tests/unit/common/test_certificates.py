"""A node's credentials and a certificate's fingerprint."""

from __future__ import annotations

import hashlib
import re

from cryptography.hazmat.primitives.asymmetric import ec

from backend.common.certificates import NodeCredentials, fingerprint_of


def test_the_fingerprint_is_sha256_of_the_der_in_lowercase_hex() -> None:
    der = b"\x30\x82 any certificate bytes"
    fingerprint = fingerprint_of(der)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", fingerprint)
    assert fingerprint == "sha256:" + hashlib.sha256(der).hexdigest()
    assert fingerprint_of(b"") == (
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


def test_the_private_key_stays_out_of_repr() -> None:
    credentials = NodeCredentials(
        b"der", b"pem", ec.generate_private_key(ec.SECP256R1()), fingerprint_of(b"der")
    )
    assert "private_key" not in repr(credentials)
