"""The hash stored for an API key's secret and compared by the front door."""

from __future__ import annotations

import hashlib

from backend.common.secret_hash import hash_secret


def test_the_hash_is_the_sha256_of_the_secret_in_lowercase_hex() -> None:
    secret = "pair-" + "A" * 43
    assert hash_secret(secret) == hashlib.sha256(secret.encode()).hexdigest()
    assert hash_secret("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
