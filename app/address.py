"""What a person types as another computer's address in the add-node dialog, read by the parser
``pair node add`` and the broker use too (``backend.common.hostport``), so the three accept the
same addresses and say the same things about the others."""

from __future__ import annotations

from backend.common.hostport import (
    DEFAULT_PORT,
    EMPTY,
    IPV6_PORT,
    NOT_AN_ADDRESS,
    PORT_RANGE,
    Address,
    Invalid,
    parse_address,
)

__all__ = [
    "DEFAULT_PORT",
    "EMPTY",
    "IPV6_PORT",
    "NOT_AN_ADDRESS",
    "PORT_RANGE",
    "Address",
    "Invalid",
    "parse_address",
]
