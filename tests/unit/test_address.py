"""What a person types as a computer's address: good ones become (host, port), bad ones a short
sentence, and ones still being typed are not errors yet."""

from __future__ import annotations

import pytest

from app.address import (
    DEFAULT_PORT,
    EMPTY,
    IPV6_PORT,
    NOT_AN_ADDRESS,
    PORT_RANGE,
    Address,
    Invalid,
    parse_address,
)

GOOD = [
    ("192.168.1.20", "192.168.1.20", DEFAULT_PORT),
    ("192.168.1.20:14321", "192.168.1.20", 14321),
    ("  192.168.1.20  ", "192.168.1.20", DEFAULT_PORT),
    ("100.64.0.7", "100.64.0.7", DEFAULT_PORT),  # a VPN (CGNAT) address is plain IPv4
    ("100.127.255.254:1", "100.127.255.254", 1),
    ("10.0.0.1:65535", "10.0.0.1", 65535),
    ("fe80::1", "fe80::1", DEFAULT_PORT),
    ("FD7A:115C::5", "fd7a:115c::5", DEFAULT_PORT),
    ("fe80::1%eth0", "fe80::1%eth0", DEFAULT_PORT),
    ("[fd7a:115c::5]:14320", "fd7a:115c::5", 14320),
    ("[fd7a:115c::5]:8080", "fd7a:115c::5", 8080),
    ("[::1]", "::1", DEFAULT_PORT),
    ("gpu-box", "gpu-box", DEFAULT_PORT),
    ("gpu-box.local", "gpu-box.local", DEFAULT_PORT),
    ("mac.tail1234.ts.net:14320", "mac.tail1234.ts.net", 14320),
    ("GPU-Box.Local:9", "GPU-Box.Local", 9),
    ("localhost", "localhost", DEFAULT_PORT),
    ("3com.example", "3com.example", DEFAULT_PORT),  # RFC 1123: a label may start with a digit
    ("a" * 63 + ".local", "a" * 63 + ".local", DEFAULT_PORT),
]

BAD = [
    ("gpu-box:0", PORT_RANGE),
    ("gpu-box:65536", PORT_RANGE),
    ("gpu-box:99999999", PORT_RANGE),
    ("192.168.1.20:http", PORT_RANGE),
    ("192.168.1.20:-1", PORT_RANGE),
    ("[fd7a::5]:0", PORT_RANGE),
    ("fd7a:115c::5:14320", IPV6_PORT),
    ("fe80::1:65535", IPV6_PORT),
    ("gpu_box", NOT_AN_ADDRESS),
    ("büro.local", NOT_AN_ADDRESS),
    ("gpu*box", NOT_AN_ADDRESS),
    ("fe80::1::2", NOT_AN_ADDRESS),
    ("fe80::zz", NOT_AN_ADDRESS),
    ("192.168.1.256", "192.168.1.256 is not an IP address (four numbers 0-255)"),
    ("192.168.01.1", "192.168.01.1 is not an IP address (four numbers 0-255)"),
    ("999", "999 is not an IP address (four numbers 0-255)"),
    ("1.2.3.4.5", "an IPv4 address has four numbers"),
    ("1..2", "1..2 is not an IP address (four numbers 0-255)"),
    ("a..b", "a host name has no empty part between dots"),
    (".local", "a host name has no empty part between dots"),
    ("-gpu", "a host name part cannot start or end with -"),
    ("gpu-.local", "a host name part cannot start or end with -"),
    ("a" * 64, "each part of a host name is at most 63 characters"),
    (("a" * 60 + ".") * 5 + "b", "a host name is at most 253 characters"),
    (":14320", "type the address before the port"),
    ("gpu box", "no spaces in an address"),
    ("http://gpu-box:14320", "type only the address, without http:// or a path"),
    ("gpu-box/v1", "type only the address, without http:// or a path"),
    ("[gpu-box]:14320", "gpu-box is not an IPv6 address"),
    ("[]", "[] is not an IPv6 address"),
    ("[fd7a::5]14320", "after ] comes :port"),
]

INCOMPLETE = [
    "", "   ", "192.168.", "192.168.1", "192.168.1.", "10", "gpu-box:", "gpu-box.", "gpu-", "[",
    "[fd7a:115c::5", "[fd7a::5]:", "fd7a:115c:",
]  # fmt: skip


@pytest.mark.parametrize(("text", "host", "port"), GOOD)
def test_good_addresses_become_host_and_port(text: str, host: str, port: int) -> None:
    assert parse_address(text) == Address(host, port)


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_addresses_say_what_is_wrong(text: str, message: str) -> None:
    result = parse_address(text)
    assert result == Invalid(message, incomplete=False)


@pytest.mark.parametrize("text", INCOMPLETE)
def test_text_still_being_typed_is_not_an_error_yet(text: str) -> None:
    result = parse_address(text)
    assert isinstance(result, Invalid)
    assert result.incomplete, result
    assert result.message


def test_empty_asks_for_an_address() -> None:
    assert parse_address("") == Invalid(EMPTY, incomplete=True)


def test_an_address_prints_as_host_and_port_with_ipv6_in_brackets() -> None:
    assert str(Address("192.168.1.20")) == "192.168.1.20:14320"
    assert str(Address("fd7a:115c::5", 14321)) == "[fd7a:115c::5]:14321"
    assert str(Address("gpu-box.local", 9)) == "gpu-box.local:9"
    # What prints is read back as the same address.
    for address in (Address("fd7a:115c::5", 14321), Address("gpu-box", 1)):
        assert parse_address(str(address)) == address
