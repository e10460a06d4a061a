"""The node's identity: a UUID minted on first run, kept with a fingerprint of where it lives."""
