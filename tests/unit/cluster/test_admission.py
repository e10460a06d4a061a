"""The join window's rules as plain functions: the window, the rate per address and the bound
on the addresses remembered."""

from __future__ import annotations

import pytest

from backend.components.cluster import admission


def test_a_window_is_open_from_its_start_until_its_end() -> None:
    window = admission.open_window(100.0, 10)
    assert (window.opened_at, window.closes_at) == (100.0, 700.0)
    assert not admission.is_open(None, 100.0)
    assert admission.is_open(window, 100.0) and admission.is_open(window, 699.9)
    assert not admission.is_open(window, 700.0) and not admission.is_open(window, 99.0)


@pytest.mark.parametrize("minutes", [0.99, 15.01])
def test_a_window_outside_1_to_15_minutes_is_refused(minutes: float) -> None:
    with pytest.raises(ValueError, match="1 to 15 minutes"):
        admission.open_window(0.0, minutes)


def test_each_address_gets_a_few_offers_a_minute() -> None:
    recent: tuple[float, ...] = ()
    for n in range(admission.OFFERS_PER_SOURCE):
        admitted = admission.admitted(recent, float(n))
        assert admitted is not None
        recent = admitted
    assert admission.admitted(recent, 10.0) is None
    assert admission.admitted(recent, admission.SOURCE_PERIOD_S + 0.5) is not None


def test_the_addresses_remembered_are_bounded_and_quiet_ones_forgotten() -> None:
    now = 1000.0
    sources = {f"10.0.{n // 256}.{n % 256}": (now - n * 0.01,) for n in range(600)}
    sources["10.9.9.9"] = (now - admission.SOURCE_PERIOD_S,)  # quiet for a whole period
    kept = admission.pruned_sources(sources, now)
    assert len(kept) == admission.MAX_SOURCES
    assert "10.0.0.0" in kept and "10.9.9.9" not in kept  # the newest stay
