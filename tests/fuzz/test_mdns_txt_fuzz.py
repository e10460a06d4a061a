"""Peers' mDNS TXT properties through ``parse_properties``: an ``Announcement`` or
``MalformedRecord``, nothing else, for any bytes (python-zeroconf hands over whatever arrived)."""

from __future__ import annotations

import random
import uuid

from hypothesis import given

from backend.components.discovery.records import (
    MAX_ADDRESSES,
    PORT_KEYS,
    Announcement,
    MalformedRecord,
    parse_properties,
    service_properties,
)
from backend.protocol.types.broker import Ports
from tests.fuzz import strategies as fuzz
from tests.fuzz.budget import EXAMPLES, fuzz_settings, measured, timeout_for

REAL = {
    key.encode(): value.encode()
    for key, value in service_properties(
        str(uuid.UUID(int=7)),
        Ports(node=14320, ollama=11434, openai=1234, llamacpp=8080),
        ["192.168.1.20", "10.0.0.5"],
    ).items()
}
KEYS = [*REAL, b"x", b"", b"\xff", b"V", b"uuid\x00"]

SPECIAL = [b"0", b"65535", b"65536", b"-1", b"+80", b" 80", b"\xb2", "²".encode(), "١".encode()]


def _value(rng: random.Random) -> bytes | None:
    roll = rng.random()
    if roll < 0.1:
        return None
    if roll < 0.35:
        return fuzz.text(rng).encode("utf-8", "surrogatepass")
    if roll < 0.5:
        return rng.randbytes(rng.randint(0, 40))
    if roll < 0.6:
        return rng.choice(SPECIAL)
    if roll < 0.7:
        return str(rng.randint(0, 2**64)).encode()
    if roll < 0.75:
        return rng.choice(b"0123456789").to_bytes(1, "big") * rng.randint(1, 6000)
    return fuzz.mutate(rng, rng.choice(list(REAL.values())))


def make_properties(rng: random.Random) -> dict[bytes, bytes | None]:
    """A real record with entries replaced, removed or added, or an arbitrary one."""
    if rng.random() < 0.8:
        properties: dict[bytes, bytes | None] = dict(REAL)
        for _ in range(rng.randint(0, 3)):
            properties.pop(rng.choice(list(REAL)), None)
    else:
        properties = {}
    for _ in range(rng.randint(0, 6)):
        key = rng.choice(KEYS) if rng.random() < 0.8 else rng.randbytes(rng.randint(0, 8))
        properties[key] = _value(rng)
    return properties


def _check(properties: dict[bytes, bytes | None]) -> None:
    try:
        announcement: Announcement | None = parse_properties(properties)
    except MalformedRecord as exc:
        announcement, refusal = None, str(exc)
        assert refusal, "a refusal says why"
    if announcement is None:
        return
    assert isinstance(announcement, Announcement)
    assert str(uuid.UUID(announcement.node_id)) == announcement.node_id
    assert set(announcement.ports) <= set(PORT_KEYS.values()) and "node" in announcement.ports
    assert all(1 <= port <= 65535 for port in announcement.ports.values())
    assert len(announcement.addresses) <= MAX_ADDRESSES


@timeout_for(EXAMPLES, 0.05)
def test_txt_records_parse_or_are_malformed() -> None:
    with measured("mdns-txt", peak_limit=16 << 20) as bounds:

        @fuzz_settings()
        @given(fuzz.rngs)
        def run(rng: fuzz.SeededRandom) -> None:
            properties = make_properties(rng)
            with bounds.example():
                _check(properties)

        run()


def test_the_real_record_parses() -> None:
    announcement = parse_properties(REAL)
    assert announcement.ports["node"] == 14320
    assert announcement.addresses == ("192.168.1.20", "10.0.0.5")


def test_port_regressions_are_malformed_not_value_errors() -> None:
    # Found by the fuzz test: ``int()`` raised ValueError past 4,300 digits and on "²".
    for port in (b"0" * 5000, "²".encode(), "١٢".encode(), b"00080"):
        properties = {**REAL, b"ni": port}
        try:
            parse_properties(properties)
        except MalformedRecord:
            continue
        assert port == b"00080"
