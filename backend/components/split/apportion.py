"""Whole layers shared out in proportion to weights, never past a cap, summing exactly."""

from __future__ import annotations

from collections.abc import Sequence


def apportion(total: int, weights: Sequence[int], caps: Sequence[int]) -> tuple[int, ...]:
    """``total`` split in proportion to ``weights`` (largest remainder), each part at most its
    cap; ties go to the earlier entry, so the same input always gives the same parts.

    Raises ``ValueError`` when the caps together hold less than ``total``.
    """
    if len(weights) != len(caps):
        raise ValueError("apportion needs one cap per weight")
    if any(weight < 0 for weight in weights) or any(cap < 0 for cap in caps):
        raise ValueError("weights and caps must not be negative")
    if total < 0 or sum(caps) < total:
        raise ValueError(f"the caps hold {sum(caps)} in all, not {total}")
    weight_sum = sum(weights)
    if weight_sum == 0:
        return _fill_in_order(total, [0] * len(caps), caps)
    pairs = zip(weights, caps, strict=True)
    parts = [min(total * weight // weight_sum, cap) for weight, cap in pairs]
    remainders = [total * weight % weight_sum for weight in weights]
    order = sorted(range(len(weights)), key=lambda index: (-remainders[index], index))
    return _fill_in_order(total, parts, caps, order)


def _fill_in_order(
    total: int, parts: list[int], caps: Sequence[int], order: Sequence[int] | None = None
) -> tuple[int, ...]:
    """Hands out what is left one at a time in ``order``, round after round, skipping full caps."""
    order = range(len(parts)) if order is None else order
    left = total - sum(parts)
    while left > 0:
        for index in order:
            if left > 0 and parts[index] < caps[index]:
                parts[index] += 1
                left -= 1
    return tuple(parts)
