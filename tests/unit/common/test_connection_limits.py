"""The caps on connections from the network: counted per address and in all, loopback never."""

from __future__ import annotations

import pytest

from backend.common.connection_limits import (
    LIMITS_ENV,
    TOTAL,
    ConnectionCounter,
    ConnectionLimits,
    is_loopback,
    limits_for,
)


def test_one_address_is_capped_and_others_still_get_in() -> None:
    counter = ConnectionCounter(ConnectionLimits(per_peer=2, total=10))
    assert [counter.admit("192.0.2.9") for _ in range(3)] == [None, None, "per-address"]
    assert counter.admit("192.0.2.10") is None
    counter.release("192.0.2.9")
    assert counter.admit("192.0.2.9") is None
    assert counter.total == 3


def test_the_total_cap_holds_across_addresses_and_frees_as_they_close() -> None:
    counter = ConnectionCounter(ConnectionLimits(per_peer=5, total=3))
    admitted = [counter.admit(f"fd00::{n}") for n in range(5)]
    assert admitted == [None, None, None, "total", "total"]
    counter.release("fd00::0")
    assert counter.admit("fd00::7") is None
    for peer in ("fd00::1", "fd00::2", "fd00::7", "fd00::never-counted"):
        counter.release(peer)
    assert counter.total == 0


@pytest.mark.parametrize(
    ("peer", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("::ffff:192.0.2.1", False),
        ("192.0.2.1", False),
        ("", False),
    ],
)
def test_loopback_is_this_computer(peer: str, loopback: bool) -> None:
    assert is_loopback(peer) is loopback
    assert ConnectionLimits().is_exempt(peer) is loopback


def test_the_total_keeps_half_the_descriptors_for_everything_else() -> None:
    assert limits_for(256, {}).total == 128
    assert limits_for(1_000_000, {}).total == TOTAL
    assert limits_for(None, {}).total == TOTAL
    assert limits_for(8, {}).total == 16


def test_the_environment_overrides_named_numbers_and_the_exempt_addresses() -> None:
    text = "per_peer=4, total=8,head_s=0.5,idle_s=5,exempt=127.0.0.1+::1"
    limits = limits_for(256, {LIMITS_ENV: text})
    assert limits == ConnectionLimits(
        per_peer=4,
        total=8,
        head_timeout_s=0.5,
        keepalive_timeout_s=5.0,
        exempt=frozenset({"127.0.0.1", "::1"}),
    )
    assert limits.is_exempt("127.0.0.1") and not limits.is_exempt("127.0.0.2")


@pytest.mark.parametrize("text", ["per_peer=0", "head_s=nan", "speed=3", "total=x"])
def test_an_unusable_override_keeps_the_defaults(text: str) -> None:
    assert limits_for(None, {LIMITS_ENV: text}) == ConnectionLimits()
