"""Where another computer reaches this one: the addresses discovery advertises for it, then the
network interfaces' own (loopback and link-local left out), so a client setting never makes the
user look up an address PAIR already knows."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from PySide6.QtNetwork import QNetworkInterface


def usable_from_another_computer(address: str) -> bool:
    """Whether ``address`` can reach this computer from another one (not loopback, link-local
    or unspecified; a host name counts unless it is ``localhost``)."""
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return address.lower() != "localhost"
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified)


def interface_addresses() -> list[str]:
    """The addresses of this computer's network interfaces that are up, IPv4 first."""
    found: list[str] = []
    for interface in QNetworkInterface.allInterfaces():
        flags = interface.flags()
        if not flags & QNetworkInterface.InterfaceFlag.IsUp:
            continue
        if flags & QNetworkInterface.InterfaceFlag.IsLoopBack:
            continue
        found += [entry.ip().toString() for entry in interface.addressEntries()]
    return sorted(found, key=lambda text: ":" in text)


def lan_addresses(advertised: Iterable[str], interfaces: Iterable[str] = ()) -> list[str]:
    """The usable addresses, the advertised ones first, each once."""
    ordered = dict.fromkeys(
        a for a in [*advertised, *interfaces] if usable_from_another_computer(a)
    )
    return list(ordered)


def url_host(address: str) -> str:
    """``address`` as a URL's host (an IPv6 address in brackets)."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address
