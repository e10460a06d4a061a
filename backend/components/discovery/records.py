"""The mDNS service record: TXT properties we publish, parsing peers' records, address ranking.

TXT keys: ``v`` protocol (1), ``uuid`` node id, ``cluster`` cluster id (empty while not
clustered), ``ips`` up to four ranked IPv4 addresses, then ports: ``ni`` node API, ``ol``
Ollama-compatible front door, ``oa`` OpenAI-compatible front door, ``ll`` llama.cpp front door.
Model lists are not in TXT (a TXT string holds 255 bytes); peers read them from node-info.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import uuid
from collections.abc import Mapping, Sequence

import msgspec
import psutil

from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports

SERVICE_TYPE = "_pair-node._tcp.local."
TXT_VERSION = "1"
MAX_ADDRESSES = 4
PORT_KEYS = {"ni": "node", "ol": "ollama", "oa": "openai", "ll": "llamacpp"}
# Bridges and virtual links whose addresses no other computer can reach.
VIRTUAL_PREFIXES = ("docker", "br-", "veth", "virbr", "lo")
MAX_INSTANCE_LABEL = 40


class MalformedRecord(ValueError):
    """A peer's TXT record that cannot be used; the message says why."""


class Announcement(msgspec.Struct, frozen=True):
    """What a peer's TXT record says about it."""

    node_id: NodeId
    cluster_id: str
    addresses: tuple[str, ...]
    ports: Mapping[str, int]


def service_properties(node_id: str, ports: Ports, addresses: Sequence[str]) -> dict[str, str]:
    """The TXT properties this node publishes, in a fixed order."""
    return {
        "v": TXT_VERSION,
        "uuid": node_id,
        "cluster": "",
        "ips": ",".join(addresses[:MAX_ADDRESSES]),
        "ni": str(ports.node),
        "ol": str(ports.ollama),
        "oa": str(ports.openai),
        "ll": str(ports.llamacpp),
    }


def instance_name_label(display_name: str, node_id: str) -> str:
    """A service instance label unique on the link: the node name plus the UUID's first part.

    Dots would split the label, so they become dashes; DNS labels hold at most 63 bytes.
    """
    label = re.sub(r"[.\x00-\x1f]", "-", display_name)[:MAX_INSTANCE_LABEL] or "pair"
    return f"{label} ({node_id[:8]})"


def parse_properties(properties: Mapping[bytes, bytes | None]) -> Announcement:
    """A peer's TXT record as an ``Announcement``; raises ``MalformedRecord`` saying why."""
    text = {_decode(key): _decode(value) for key, value in properties.items() if value is not None}
    if text.get("v") != TXT_VERSION:
        raise MalformedRecord(f"unsupported protocol version {text.get('v')!r}")
    node_id = NodeId(_node_id(text.get("uuid", "")))
    ports = {name: _port(key, text[key]) for key, name in PORT_KEYS.items() if key in text}
    if "node" not in ports:
        raise MalformedRecord("no node API port (ni)")
    addresses = tuple(_address(part) for part in text.get("ips", "").split(",") if part)
    return Announcement(node_id, text.get("cluster", ""), addresses[:MAX_ADDRESSES], ports)


def interface_addresses() -> dict[str, list[str]]:
    """Every interface's IPv4 addresses, by interface name."""
    return {
        name: [entry.address for entry in entries if entry.family == socket.AF_INET]
        for name, entries in psutil.net_if_addrs().items()
    }


def rank_addresses(interfaces: Mapping[str, Sequence[str]]) -> list[str]:
    """Up to four IPv4 addresses other computers can dial, best first.

    Private LAN addresses come first, then VPN-range (100.64/10) and public ones; loopback,
    link-local and addresses on bridges or virtual links are skipped.
    """
    ranked: list[tuple[int, str, str]] = []
    for name, addresses in interfaces.items():
        if name.startswith(VIRTUAL_PREFIXES):
            continue
        for text in addresses:
            rank = _address_rank(text)
            if rank is not None:
                ranked.append((rank, name, text))
    ranked.sort()
    unique = list(dict.fromkeys(text for _, _, text in ranked))
    return unique[:MAX_ADDRESSES]


def _address_rank(text: str) -> int | None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if address.version != 4 or address.is_loopback or address.is_link_local:
        return None
    if address.is_multicast or address.is_unspecified:
        return None
    if address in ipaddress.ip_network("100.64.0.0/10"):
        return 1
    return 0 if address.is_private else 2


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedRecord("a TXT entry is not UTF-8") from None


def _node_id(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise MalformedRecord(f"uuid {text[:64]!r} is not a UUID") from None


def _port(key: str, text: str) -> int:
    # ``isdigit`` also admits digits ``int`` refuses ("²"), and ``int`` refuses 4,300 digits.
    if not (text.isascii() and text.isdigit()) or len(text) > 5 or not 1 <= int(text) <= 65535:
        raise MalformedRecord(f"{key}={text[:16]!r} is not a port")
    return int(text)


def _address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise MalformedRecord(f"ips entry {text[:64]!r} is not an IP address") from None
