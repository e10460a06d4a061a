"""Pairing computers into a cluster: the PIN-based PAKE and the crypto built on it."""
