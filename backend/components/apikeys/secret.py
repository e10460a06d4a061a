"""A LAN API key's secret and its public prefix; the rules for a key's name (pure).

The secret is 32 random bytes from ``secrets`` (256 bits); its hash, shared with the proxy
worker's front door, is ``backend.common.secret_hash``.
"""

from __future__ import annotations

import secrets

SECRET_PREFIX = "pair-"
SECRET_BYTES = 32
# "pair-" and 4 characters of the random part: enough to tell keys apart in a list, while the
# other 39 (about 232 bits) stay secret.
PUBLIC_PREFIX_LENGTH = len(SECRET_PREFIX) + 4
MAX_NAME_LENGTH = 64


def new_secret() -> str:
    """A fresh secret: ``pair-`` and 43 URL-safe base64 characters (32 random bytes)."""
    return SECRET_PREFIX + secrets.token_urlsafe(SECRET_BYTES)


def public_prefix(secret: str) -> str:
    """The start of ``secret`` shown in lists (``pair-AbCd``)."""
    return secret[:PUBLIC_PREFIX_LENGTH]


def new_key_id() -> str:
    """A short public id for a key (random, unrelated to its secret)."""
    return secrets.token_hex(4)


def key_name(text: str) -> str:
    """``text`` as a key's name: 1-64 printable characters once trimmed; ``ValueError`` else."""
    name = text.strip()
    if not 1 <= len(name) <= MAX_NAME_LENGTH or not name.isprintable():
        raise ValueError(f"a key's name is 1-{MAX_NAME_LENGTH} printable characters")
    return name
