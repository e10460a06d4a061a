"""Ids that must not be mixed up, and the base every wire payload derives from."""

from __future__ import annotations

from typing import NewType

import msgspec

# Ids that must not be mixed up: each is a plain string on the wire.
NodeId = NewType("NodeId", str)  # a PAIR node's UUID, or a manual id for an engine-only address
EngineName = NewType("EngineName", str)  # a manifest's name: ollama, lmstudio, llamacpp
JobKey = NewType("JobKey", str)  # <origin node id>/<run id>/<n>
ManualNodeId = NewType("ManualNodeId", str)  # an entry of the manual nodes list
InviteId = NewType("InviteId", str)  # a pairing invitation


class Wire(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """Base of every wire payload: immutable, keyword-only."""
