"""The node's identity: a UUID minted on first run, kept with a record of where it lives."""
