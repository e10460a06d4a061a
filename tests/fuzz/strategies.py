"""Hostile inputs for the fuzz tests, built from one Hypothesis-drawn ``random.Random`` each.

Drawing a whole nested document through Hypothesis costs milliseconds an input; drawing one
seed and building the input from a ``Random`` costs microseconds, so 10^5 inputs run in
minutes. Generation stays reproducible (``derandomize``) and Hypothesis still reports the
failing input.
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import strategies as st


class SeededRandom(random.Random):
    """A ``Random`` that says its seed, so a failing input can be rebuilt by hand."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.seed_value = seed

    def __repr__(self) -> str:
        return f"SeededRandom({self.seed_value})"


# One draw an input (``st.randoms`` would route every call through Hypothesis, at a
# millisecond an input).
rngs = st.integers(min_value=0, max_value=2**64 - 1).map(SeededRandom)

ODD_TEXT = ["", " ", "\x00", "\u2028", "é", "İ", "²", "١٢٣", "\ufeff", "\ud800", "a" * 300, "1e400"]
HUGE_NUMBERS: list[Any] = [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**400, 1e308, -0.0]


def text(rng: random.Random, max_size: int = 24) -> str:
    """Short text from a few alphabets, sometimes unusual or very long."""
    roll = rng.random()
    if roll < 0.15:
        return rng.choice(ODD_TEXT)
    if roll < 0.2:
        return rng.choice("ab\u00e9\u4e2d") * rng.randint(1, 20_000)
    alphabet = rng.choice(["abcxyz:/._- ", "0123456789", '\x00\x1f"\\\u2028é中😀\ud800'])
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, max_size)))


def scalar(rng: random.Random) -> Any:
    """A JSON scalar, huge numbers included."""
    kind = rng.randrange(7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.randint(-(2**31), 2**31)
    if kind == 3:
        return rng.choice(HUGE_NUMBERS)
    if kind == 4:
        return rng.uniform(-1e6, 1e6)
    return text(rng)


def value(rng: random.Random, depth: int = 3) -> Any:
    """Any JSON value of modest size."""
    roll = rng.random()
    if depth <= 0 or roll < 0.55:
        return scalar(rng)
    if roll < 0.78:
        return [value(rng, depth - 1) for _ in range(rng.randint(0, 4))]
    return {text(rng, 8): value(rng, depth - 1) for _ in range(rng.randint(0, 4))}


def deep(rng: random.Random, max_depth: int = 20_000) -> bytes:
    """Nesting (by default deep enough to exhaust a recursive decoder's stack), balanced or not."""
    depth = rng.randint(1, max_depth)
    opening, inner, closing = rng.choice(
        [(b"[", b"", b"]"), (b'{"a":', b"1", b"}"), (b'[{"a":', b"1", b"}]")]
    )
    tail = closing * depth
    if rng.random() < 0.3:
        tail = tail[: rng.randint(0, len(tail))]
    document = opening * depth + inner + tail
    return b'{"model":"m","x":' + document + b"}" if rng.random() < 0.5 else document


def encode(rng: random.Random, document: Any) -> bytes:
    """JSON text for ``document``: the standard library's, which may write NaN, or invalid UTF-8
    once a lone surrogate is in it."""
    return json.dumps(document, ensure_ascii=rng.random() < 0.3).encode("utf-8", "surrogatepass")


def mutate(rng: random.Random, source: bytes) -> bytes:
    """``source`` truncated, with bytes flipped, inserted, deleted or repeated."""
    data = bytearray(source)
    for _ in range(rng.randint(0, 4)):
        if not data:
            break
        position = rng.randrange(len(data))
        action = rng.randrange(5)
        if action == 0:
            del data[position:]
        elif action == 1:
            data[position] = rng.randrange(256)
        elif action == 2:
            data[position:position] = rng.randbytes(rng.randint(1, 8))
        elif action == 3:
            del data[position : position + rng.randint(1, 8)]
        else:
            end = min(len(data), position + rng.randint(1, 16))
            data[position:position] = data[position:end] * rng.randint(1, 64)
    return bytes(data)


def replace_somewhere(rng: random.Random, document: Any, replacement: Any) -> Any:
    """A copy of ``document`` with one member (at any depth) replaced, removed or added."""
    if not isinstance(document, dict | list) or not document or rng.random() < 0.25:
        return replacement
    copy: Any = dict(document) if isinstance(document, dict) else list(document)
    key = rng.choice(list(copy)) if isinstance(copy, dict) else rng.randrange(len(copy))
    action = rng.random()
    if action < 0.2:
        del copy[key]
    elif action < 0.3 and isinstance(copy, dict):
        copy[text(rng, 8)] = replacement
    else:
        copy[key] = replace_somewhere(rng, copy[key], replacement)
    return copy
