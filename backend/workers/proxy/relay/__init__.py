"""The relay: paired computers' requests served by this node's engines, over pinned mutual TLS."""
