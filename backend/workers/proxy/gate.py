"""Who may use a front door over plaintext: loopback peers, loopback Host names, loopback Origins.

The Host check defeats DNS rebinding (a web page whose name resolves to 127.0.0.1 still sends its
own name as Host); the Origin check stops other web pages from driving the API from a browser.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def peer_allowed(peer_address: str | None) -> bool:
    """Whether the TCP peer is this computer (IPv4-mapped IPv6 addresses included)."""
    if not peer_address:
        return False
    try:
        address = ipaddress.ip_address(peer_address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def host_name(host_header: str) -> str | None:
    """The name in a Host header without its port (``[::1]:80`` gives ``::1``); None if invalid."""
    if host_header.startswith("["):
        name, bracket, rest = host_header[1:].partition("]")
        if not bracket or (rest and not _is_port_suffix(rest)):
            return None
        return name
    name, colon, port = host_header.partition(":")
    if colon and not port.isdigit():
        return None
    return name


def host_allowed(host_header: str | None) -> bool:
    """Whether a Host header names this computer (a missing header is HTTP/1.0, allowed)."""
    if host_header is None:
        return True
    name = host_name(host_header.strip())
    return name is not None and name.lower() in LOOPBACK_NAMES


def origin_allowed(origin: str | None) -> bool:
    """Whether a browser Origin is absent or a loopback http(s) origin on any port."""
    if origin is None:
        return True
    try:
        parts = urlsplit(origin)
        hostname = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and hostname in LOOPBACK_NAMES


def refusal(peer_address: str | None, host_header: str | None, origin: str | None) -> str | None:
    """Why a request must be refused with 403, or None when it may pass."""
    if not peer_allowed(peer_address):
        return "plaintext access is only allowed from this computer (loopback)"
    if not host_allowed(host_header):
        return "the Host header must name this computer (localhost, 127.0.0.1 or [::1])"
    if not origin_allowed(origin):
        return "cross-origin requests from web pages that are not on this computer are refused"
    return None


def _is_port_suffix(text: str) -> bool:
    return text.startswith(":") and text[1:].isdigit()
