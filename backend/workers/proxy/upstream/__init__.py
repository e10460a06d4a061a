"""Reaching an engine: the lean HTTP client, one attempt up to its commit, then the stream."""
