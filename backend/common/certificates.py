"""A node's TLS credentials as the contexts load them, and a certificate's fingerprint (pure).

In PAIR a fingerprint is always a certificate's: ``sha256:`` and the hex SHA-256 of its DER, what
people compare when they pair and what a removed member's tombstone names.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric import ec


@dataclass(frozen=True, slots=True)
class NodeCredentials:
    """This node's certificate (DER and PEM), its private key, and the certificate's fingerprint."""

    cert_der: bytes
    cert_pem: bytes
    private_key: ec.EllipticCurvePrivateKey = field(repr=False, compare=False)
    fingerprint: str


def fingerprint_of(cert_der: bytes) -> str:
    """``"sha256:"`` and the lowercase hex SHA-256 of a certificate's DER."""
    return "sha256:" + hashlib.sha256(cert_der).hexdigest()
