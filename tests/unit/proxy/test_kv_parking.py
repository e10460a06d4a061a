"""The parked-conversation ledger: one file per session, bounded in number and bytes."""

from __future__ import annotations

from backend.protocol.proxy import PARKED_PREFIX, PARKED_SUFFIX
from backend.workers.proxy.scheduler.kv_parking import Parking, parked_name


def test_a_sessions_file_name_is_stable_private_and_ours() -> None:
    name = parked_name("u:alice@example.org")
    assert name == parked_name("u:alice@example.org") != parked_name("u:bob")
    assert name.startswith(PARKED_PREFIX) and name.endswith(PARKED_SUFFIX)
    assert "alice" not in name and "/" not in name


def test_the_oldest_files_go_first_past_the_count_or_the_bytes() -> None:
    parking = Parking(max_entries=2, max_bytes=100)
    assert parking.parked("a", 10) == []
    assert parking.parked("b", 10) == []
    assert parking.parked("c", 10) == [parked_name("a")], "three files, two allowed"
    assert parking.parked("b", 20) == [], "parking again refreshes b"
    assert parking.parked("d", 90) == [parked_name("c"), parked_name("b")]
    assert parking.file_of("d") == parked_name("d") and len(parking) == 1
    assert parking.parked("huge", 500) == [parked_name("d")], "the newest stays, even alone"
    assert parking.file_of("huge") is not None


def test_restoring_or_clearing_hands_back_the_files_to_delete() -> None:
    parking = Parking()
    parking.parked("a", 1)
    parking.parked("b", 2)
    assert parking.restored("a") == parked_name("a") and parking.file_of("a") is None
    assert parking.restored("a") is None
    assert parking.total_bytes() == 2
    assert parking.clear() == [parked_name("b")] and len(parking) == 0
    assert parking.file_of(None) is None
