"""Another computer's address as a person types it (``pair node add``, the app's add-node dialog)
or a client sends it (``nodes:add``): an IPv4 or IPv6 address or a host name, with an optional
port, read into ``(host, port)`` or a short sentence saying what is wrong; and a host written
into a URL.

Accepted: ``192.168.1.20``, ``192.168.1.20:14321``, ``fe80::1`` (a bare IPv6 address has no
port: its colons would be ambiguous), ``[fd7a:115c::5]``, ``[fd7a:115c::5]:14320``, ``gpu-box``,
``gpu-box.local``, ``mac.tail1234.ts.net:14320``. Host names follow RFC 1123 (letters, digits and
hyphens, labels of at most 63 characters, 253 in all). VPN ranges such as 100.64.0.0/10 are
ordinary IPv4. Hosts come back without brackets, IP addresses in their canonical form.
"""

from __future__ import annotations

import ipaddress
import re

import msgspec

DEFAULT_PORT = 14320
PORT_RANGE = "port must be 1-65535"
NOT_AN_ADDRESS = "not an address or a host name"
IPV6_PORT = "IPv6 with a port needs brackets: [addr]:port"
EMPTY = "type an IP address or a host name"

_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_LABEL_CHARACTERS = re.compile(r"[A-Za-z0-9-]+")
_DIGITS = re.compile(r"[0-9]+")
_IPV4_PREFIX = re.compile(r"[0-9.]+")
_IPV6_CHARACTERS = re.compile(r"[0-9A-Fa-f:.]+")
_MAX_NAME = 253
_MAX_LABEL = 63


class Address(msgspec.Struct, frozen=True):
    """A host (an IP address without brackets, or a host name) and a TCP port."""

    host: str
    port: int = DEFAULT_PORT

    def __str__(self) -> str:
        """``host:port``, with IPv6 in brackets."""
        return f"{url_host(self.host)}:{self.port}"


class Invalid(msgspec.Struct, frozen=True):
    """Why the text is no address. ``incomplete``: it may become one as the person types on
    (``192.168.``, ``gpu-box:``), so it is no reason to show an error yet; ``final`` then says
    what is wrong when the text is all there is (a command line, an RPC), if ``message`` does
    not."""

    message: str
    incomplete: bool = False
    final: str = ""


class AddressError(ValueError):
    """Text that is no host or address; the message says what is wrong."""


def url_host(host: str) -> str:
    """``host`` as the host part of a URL or of ``host:port``: IPv6 in brackets (RFC 3986)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def parse_address(text: str, default_port: int = DEFAULT_PORT) -> Address | Invalid:
    """``text`` (surrounding spaces ignored) as an address, ``default_port`` when it has none,
    or what is wrong with it."""
    read = _read(text)
    if isinstance(read, Invalid):
        return read
    host, port = read
    return Address(host, default_port if port is None else port)


def parse_host_port(
    text: str, default_port: int = DEFAULT_PORT, *, port: int | None = None
) -> tuple[str, int]:
    """``text`` as ``(host, port)``. ``port`` is one given on its own (``--port``): it stands in
    for a port missing from the text, and a different one in the text is an error; else
    ``default_port``. Raises ``AddressError``."""
    if port is not None:
        _check_port(port)
    read = _read(text)
    if isinstance(read, Invalid):
        raise AddressError(read.final or read.message)
    host, typed = read
    if typed is None:
        return host, default_port if port is None else port
    if port is not None and typed != port:
        raise AddressError(f"{text.strip()} says port {typed} but --port says {port}: give one")
    return host, typed


def parse_host(text: str) -> str:
    """``text`` as a host alone (an IPv6 address with or without brackets); raises
    ``AddressError``, also for a port in the text."""
    read = _read(text)
    if isinstance(read, Invalid):
        raise AddressError(read.final or read.message)
    host, port = read
    if port is not None:
        raise AddressError("the port goes separately, not in the address")
    return host


def parse_port(text: str) -> int:
    """``text`` as a TCP port 1-65535; raises ``AddressError``."""
    port = _port(text.strip())
    if isinstance(port, Invalid):
        raise AddressError(f"{PORT_RANGE}, not {text.strip() or 'nothing'}")
    return port


def _check_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise AddressError(f"{PORT_RANGE}, not {port}")


def _read(text: str) -> tuple[str, int | None] | Invalid:
    """The host and the port typed (``None``: none), or what is wrong."""
    text = text.strip()
    if not text:
        return Invalid(EMPTY, incomplete=True)
    if any(character.isspace() for character in text):
        return Invalid("no spaces in an address")
    if "://" in text or "/" in text:
        return Invalid("type only the address, without http:// or a path")
    if text.startswith("["):
        return _bracketed(text)
    if text.count(":") > 1:
        return _bare_ipv6(text)
    host, colon, port_text = text.partition(":")
    if colon and not host:
        return Invalid("type the address before the port")
    port = _port(port_text) if colon else None
    checked = _host(host)
    if isinstance(checked, Invalid):
        return checked
    return port if isinstance(port, Invalid) else (checked, port)


def _bracketed(text: str) -> tuple[str, int | None] | Invalid:
    inside, closing, rest = text[1:].partition("]")
    if not closing:
        if _IPV6_CHARACTERS.fullmatch(inside or ":"):
            return Invalid("close the IPv6 address with ]", incomplete=True)
        return Invalid(NOT_AN_ADDRESS)
    host = _ipv6(inside)
    if host is None:
        return Invalid(f"{inside or '[]'} is not an IPv6 address")
    if not rest:
        return host, None
    if not rest.startswith(":"):
        return Invalid("after ] comes :port")
    port = _port(rest[1:])
    return port if isinstance(port, Invalid) else (host, port)


def _bare_ipv6(text: str) -> tuple[str, int | None] | Invalid:
    host = _ipv6(text)
    if host is not None:
        return host, None
    head, _, tail = text.rpartition(":")
    if _DIGITS.fullmatch(tail) and _ipv6(head) is not None:
        return Invalid(IPV6_PORT)
    if _IPV6_CHARACTERS.fullmatch(text) and text.endswith((":", ".")):
        return Invalid(
            "an IPv6 address, still being typed",
            incomplete=True,
            final=f"{text} is not an IPv6 address",
        )
    return Invalid(NOT_AN_ADDRESS)


def _ipv6(text: str) -> str | None:
    try:
        return str(ipaddress.IPv6Address(text))
    except ValueError:
        return None


def _port(text: str) -> int | Invalid:
    if not text:
        return Invalid("type the port after :", incomplete=True)
    if not _DIGITS.fullmatch(text) or len(text) > 5 or not 1 <= int(text) <= 65535:
        return Invalid(PORT_RANGE)
    return int(text)


def _host(host: str) -> str | Invalid:
    if _IPV4_PREFIX.fullmatch(host):
        return _ipv4(host)
    return _host_name(host)


def _ipv4(host: str) -> str | Invalid:
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    parts = host.split(".")
    numbers_fit = all(not part or (len(part) <= 3 and int(part) <= 255) for part in parts)
    still_typing = len(parts) < 4 or (len(parts) == 4 and parts[-1] == "")  # ``192.168.1.``
    if still_typing and numbers_fit and ".." not in host and not host.startswith("."):
        return Invalid("an IPv4 address has four numbers", incomplete=True)
    if len(parts) > 4:
        return Invalid("an IPv4 address has four numbers")
    return Invalid(f"{host} is not an IP address (four numbers 0-255)")


def _host_name(host: str) -> str | Invalid:
    if len(host) > _MAX_NAME:
        return Invalid(f"a host name is at most {_MAX_NAME} characters")
    labels = host.split(".")
    last = labels[-1]
    for label in labels[:-1]:
        problem = _label_problem(label)
        if problem is not None:
            return problem
    if last == "":
        # ``gpu-box.`` is a name still being typed.
        return Invalid(
            "a host name, still being typed", incomplete=True, final="a host name cannot end with ."
        )
    if last.endswith("-") and _LABEL_CHARACTERS.fullmatch(last):
        return Invalid(
            "a host name, still being typed",
            incomplete=True,
            final="a host name part cannot start or end with -",
        )
    problem = _label_problem(last)
    return host if problem is None else problem


def _label_problem(label: str) -> Invalid | None:
    if not label:
        return Invalid("a host name has no empty part between dots")
    if not _LABEL_CHARACTERS.fullmatch(label):
        return Invalid(NOT_AN_ADDRESS)
    if len(label) > _MAX_LABEL:
        return Invalid(f"each part of a host name is at most {_MAX_LABEL} characters")
    if not _LABEL.fullmatch(label):
        return Invalid("a host name part cannot start or end with -")
    return None
