"""Who may use a front door: loopback peers, loopback Host names, loopback Origins."""

from __future__ import annotations

import pytest

from backend.workers.proxy.gate import host_allowed, origin_allowed, peer_allowed, refusal


@pytest.mark.parametrize(
    ("peer", "allowed"),
    [
        ("127.0.0.1", True),
        ("127.8.9.1", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("192.168.1.20", False),
        ("::ffff:192.168.1.20", False),
        ("fe80::1%eth0", False),
        (None, False),
        ("not-an-ip", False),
    ],
)
def test_only_loopback_peers_pass(peer: str | None, allowed: bool) -> None:
    assert peer_allowed(peer) is allowed


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("localhost", True),
        ("LOCALHOST:11434", True),
        ("127.0.0.1", True),
        ("127.0.0.1:8080", True),
        ("[::1]", True),
        ("[::1]:1234", True),
        (None, True),
        ("attacker.example", False),
        ("attacker.example:11434", False),
        ("localhost.attacker.example", False),
        ("127.0.0.1.nip.io", False),
        ("localhost:abc", False),
        ("[::1]x", False),
        ("[::1", False),
        ("", False),
    ],
)
def test_host_header_must_name_this_computer(host: str | None, allowed: bool) -> None:
    assert host_allowed(host) is allowed


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (None, True),
        ("http://localhost:3000", True),
        ("https://127.0.0.1", True),
        ("http://[::1]:8080", True),
        ("https://evil.example", False),
        ("http://localhost.evil.example", False),
        ("null", False),
        ("file://", False),
        ("http://localhost:notaport", False),
    ],
)
def test_browser_origin_must_be_loopback(origin: str | None, allowed: bool) -> None:
    assert origin_allowed(origin) is allowed


def test_refusal_names_the_first_failed_check() -> None:
    assert refusal("127.0.0.1", "localhost:11434", None) is None
    assert "loopback" in (refusal("10.0.0.5", "localhost", None) or "")
    assert "Host" in (refusal("127.0.0.1", "evil.example", None) or "")
    assert "cross-origin" in (refusal("127.0.0.1", "localhost", "https://evil.example") or "")
