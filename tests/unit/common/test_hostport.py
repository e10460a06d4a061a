"""Another computer's address, as ``pair node add`` and ``node/add`` read it: every written form
becomes ``(host, port)``, a bad one a sentence saying what is wrong; IPv6 is bracketed in URLs."""

from __future__ import annotations

import re

import pytest

from backend.common.hostport import (
    DEFAULT_PORT,
    EMPTY,
    IPV6_PORT,
    NOT_AN_ADDRESS,
    PORT_RANGE,
    AddressError,
    parse_host,
    parse_host_port,
    parse_port,
    url_host,
)


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("10.0.0.5", "10.0.0.5", DEFAULT_PORT),
        ("10.0.0.5:14320", "10.0.0.5", 14320),
        ("1.2.3.4:9000", "1.2.3.4", 9000),
        (" 1.2.3.4:1 ", "1.2.3.4", 1),
        ("gpu-box", "gpu-box", DEFAULT_PORT),
        ("gpu-box.local:65535", "gpu-box.local", 65535),
        ("[::1]", "::1", DEFAULT_PORT),
        ("[::1]:9000", "::1", 9000),
        ("[FD7A:115C::5]:14321", "fd7a:115c::5", 14321),
        ("fe80::1", "fe80::1", DEFAULT_PORT),
        ("fe80::1%eth0", "fe80::1%eth0", DEFAULT_PORT),
        ("[fe80::1%eth0]:9000", "fe80::1%eth0", 9000),
    ],
)
def test_every_written_form_becomes_host_and_port(text: str, host: str, port: int) -> None:
    assert parse_host_port(text) == (host, port)


def test_the_default_port_is_the_callers() -> None:
    assert parse_host_port("10.0.0.5", 11434) == ("10.0.0.5", 11434)
    assert parse_host_port("10.0.0.5:9000", 11434) == ("10.0.0.5", 9000)


@pytest.mark.parametrize(
    ("text", "port", "host_port"),
    [
        ("10.0.0.5", 9000, ("10.0.0.5", 9000)),
        ("10.0.0.5:9000", 9000, ("10.0.0.5", 9000)),
        ("fe80::1", 9000, ("fe80::1", 9000)),
        ("[fe80::1]:9000", 9000, ("fe80::1", 9000)),
    ],
)
def test_a_port_given_on_its_own_fills_in_or_agrees(
    text: str, port: int, host_port: tuple[str, int]
) -> None:
    assert parse_host_port(text, port=port) == host_port


@pytest.mark.parametrize(
    ("text", "port", "says"),
    [
        ("10.0.0.5:0", None, PORT_RANGE),
        ("10.0.0.5:99999", None, PORT_RANGE),
        ("10.0.0.5:-1", None, PORT_RANGE),
        ("10.0.0.5:http", None, PORT_RANGE),
        ("[::1]:0", None, PORT_RANGE),
        ("host:", None, "type the port after :"),
        (":14320", None, "type the address before the port"),
        ("[::1", None, "close the IPv6 address with ]"),
        ("[::1]x", None, "after ] comes :port"),
        ("[10.0.0.5]:9000", None, "10.0.0.5 is not an IPv6 address"),
        ("[gpu-box]", None, "gpu-box is not an IPv6 address"),
        ("fd7a:115c::5:14320", None, IPV6_PORT),
        ("fd7a:115c:", None, "fd7a:115c: is not an IPv6 address"),
        ("a b", None, "no spaces in an address"),
        ("http://x", None, "without http:// or a path"),
        ("x/v1", None, "without http:// or a path"),
        ("", None, EMPTY),
        ("   ", None, EMPTY),
        ("10.0.0", None, "an IPv4 address has four numbers"),
        ("10.0.0.256", None, "10.0.0.256 is not an IP address (four numbers 0-255)"),
        ("gpu_box", None, NOT_AN_ADDRESS),
        ("gpu-", None, "a host name part cannot start or end with -"),
        ("gpu-box.", None, "a host name cannot end with ."),
        ("a" * 64, None, "each part of a host name is at most 63 characters"),
        ("10.0.0.5:9000", 9001, "10.0.0.5:9000 says port 9000 but --port says 9001: give one"),
        ("10.0.0.5", 0, PORT_RANGE),
        ("10.0.0.5", 65536, PORT_RANGE),
    ],
)
def test_bad_addresses_are_refused_saying_why(text: str, port: int | None, says: str) -> None:
    with pytest.raises(AddressError, match=re.escape(says)):
        parse_host_port(text, port=port)


@pytest.mark.parametrize(
    ("text", "host"),
    [
        ("10.0.0.5", "10.0.0.5"),
        ("gpu-box.local", "gpu-box.local"),
        ("fe80::1", "fe80::1"),
        ("[FE80::1]", "fe80::1"),
        (" [::1] ", "::1"),
    ],
)
def test_a_host_alone_is_read_with_or_without_brackets(text: str, host: str) -> None:
    assert parse_host(text) == host


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("10.0.0.5:14320", "the port goes separately"),
        ("[::1]:14320", "the port goes separately"),
        ("", EMPTY),
        ("a b", "no spaces"),
        ("http://x", "without http://"),
    ],
)
def test_a_host_alone_refuses_a_port_and_bad_hosts(text: str, says: str) -> None:
    with pytest.raises(AddressError, match=re.escape(says)):
        parse_host(text)


def test_ports_are_1_to_65535() -> None:
    assert [parse_port(text) for text in ("1", " 80 ", "65535")] == [1, 80, 65535]
    for text in ("0", "65536", "99999", "-1", "x", ""):
        with pytest.raises(AddressError, match=PORT_RANGE):
            parse_port(text)


@pytest.mark.parametrize(
    ("host", "in_url"),
    [
        ("::1", "[::1]"),
        ("fd7a:115c::5", "[fd7a:115c::5]"),
        ("fe80::1%eth0", "[fe80::1%eth0]"),
        ("[::1]", "[::1]"),
        ("10.0.0.5", "10.0.0.5"),
        ("gpu-box.local", "gpu-box.local"),
    ],
)
def test_ipv6_is_bracketed_in_urls(host: str, in_url: str) -> None:
    assert url_host(host) == in_url
