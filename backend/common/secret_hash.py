"""The hash of a LAN API key's secret: what the broker stores and the front door compares.

A secret is 32 random bytes from ``secrets`` (256 bits), so its SHA-256 is all that is stored
and all the front door compares against: nobody can guess such a secret or find it from its
hash, and a salt or a slow KDF (bcrypt, scrypt, Argon2) protects only guessable, low-entropy
passwords while it would slow every request's check.
"""

from __future__ import annotations

import hashlib


def hash_secret(secret: str) -> str:
    """What is stored for ``secret`` and what the front door compares: its SHA-256, hex."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()
