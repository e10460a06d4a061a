"""Whole parts in proportion to weights: exact sums, caps kept, ties to the earlier entry."""

from __future__ import annotations

import pytest

from backend.components.split.apportion import apportion


def test_parts_follow_the_weights_by_largest_remainder() -> None:
    assert apportion(10, [1, 1, 1], [10, 10, 10]) == (4, 3, 3)
    assert apportion(41, [7, 5, 3], [41, 41, 41]) == (19, 14, 8)


def test_a_tie_goes_to_the_earlier_entry() -> None:
    assert apportion(1, [1, 1], [1, 1]) == (1, 0)


def test_a_full_cap_passes_its_share_to_the_others() -> None:
    assert apportion(10, [9, 1], [5, 10]) == (5, 5)


def test_zero_weights_fill_the_caps_in_order() -> None:
    assert apportion(3, [0, 0], [2, 2]) == (2, 1)


def test_caps_that_hold_too_little_are_an_error() -> None:
    with pytest.raises(ValueError, match="the caps hold 3 in all, not 4"):
        apportion(4, [1, 1], [1, 2])
    with pytest.raises(ValueError, match="one cap per weight"):
        apportion(1, [1], [1, 1])
    with pytest.raises(ValueError, match="must not be negative"):
        apportion(1, [-1, 2], [1, 1])
