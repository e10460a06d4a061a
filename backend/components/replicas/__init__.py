"""Replicas on demand: more computers for a hot model, unloaded when idle (docs/REPLICAS.md)."""
