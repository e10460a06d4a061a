"""Broker machinery shared by components: supervision, RPC serving, events, storage, logging."""
