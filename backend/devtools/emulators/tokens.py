"""Deterministic text for the emulators: token counts, seeded replies, stop strings, embeddings.

Everything here is a pure function: the same model, prompt and options always give the same
reply, so tests can compare streamed and non-streamed text.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from typing import Final, Literal

import msgspec

DoneReason = Literal["stop", "length"]

WORDS: Final = [
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "do",
    "eiusmod",
    "tempor",
    "incididunt",
    "ut",
    "labore",
    "et",
    "dolore",
    "magna",
    "aliqua",
    "enim",
    "ad",
    "minim",
    "veniam",
    "quis",
    "nostrud",
    "exercitation",
    "ullamco",
    "laboris",
    "nisi",
    "aliquip",
    "ex",
    "ea",
    "commodo",
    "consequat",
    "duis",
    "aute",
    "irure",
    "in",
    "reprehenderit",
    "voluptate",
    "velit",
    "esse",
    "cillum",
    "fugiat",
    "nulla",
    "pariatur",
    "excepteur",
    "sint",
    "occaecat",
    "cupidatat",
    "non",
    "proident",
    "sunt",
    "culpa",
    "qui",
    "officia",
    "deserunt",
    "mollit",
    "anim",
    "id",
    "est",
    "laborum",
]
_TOKEN_PATTERN: Final = re.compile(r"\w+|[^\w\s]")
VOCABULARY_SIZE: Final = 32_000


class Reply(msgspec.Struct, frozen=True):
    """The tokens a request gets, in order, and why generation ended."""

    tokens: tuple[str, ...]
    done_reason: DoneReason

    @property
    def text(self) -> str:
        """All tokens joined."""
        return "".join(self.tokens)


def count_tokens(text: str) -> int:
    """A stable token count: words and punctuation marks."""
    return len(_TOKEN_PATTERN.findall(text))


def token_ids(text: str) -> list[int]:
    """Stable token ids for ``text`` (Ollama's ``context`` field)."""
    return [_stable_int(piece) % VOCABULARY_SIZE for piece in _TOKEN_PATTERN.findall(text)]


def reply_seed(model: str, prompt: str, seed: int | None) -> int:
    """The request's own seed, or one derived from model and prompt."""
    if seed is not None:
        return seed
    return _stable_int(model + "\x00" + prompt)


def natural_length(seed: int, fixed: int | None) -> int:
    """How many tokens the "model" says before it stops by itself (8-24 unless fixed)."""
    if fixed is not None:
        return max(1, fixed)
    return 8 + seed % 17


def plan_reply(
    seed: int,
    *,
    natural_tokens: int,
    num_predict: int | None = None,
    stop: tuple[str, ...] = (),
) -> Reply:
    """The reply for ``seed``: cut at the first stop string, then capped at ``num_predict``."""
    tokens = _sentence(seed, natural_tokens)
    reason: DoneReason = "stop"
    tokens = _cut_at_stop(tokens, stop)
    if num_predict is not None and 0 < num_predict < len(tokens):
        tokens = tokens[:num_predict]
        reason = "length"
    return Reply(tuple(tokens), reason)


def _sentence(seed: int, length: int) -> list[str]:
    chooser = random.Random(seed)
    words = [chooser.choice(WORDS) for _ in range(length)]
    tokens = [words[0].capitalize()] + [" " + word for word in words[1:]]
    tokens[-1] += "."
    return tokens


def _cut_at_stop(tokens: list[str], stop: tuple[str, ...]) -> list[str]:
    text = "".join(tokens)
    hits = [text.find(marker) for marker in stop if marker]
    positions = [position for position in hits if position >= 0]
    if not positions:
        return tokens
    end = min(positions)
    kept: list[str] = []
    offset = 0
    for token in tokens:
        if offset + len(token) <= end:
            kept.append(token)
        elif offset < end:
            kept.append(token[: end - offset])
        offset += len(token)
    return kept


def embedding(text: str, dimensions: int) -> list[float]:
    """A unit-length vector derived from ``text`` (equal texts, equal vectors)."""
    chooser = random.Random(_stable_int(text))
    raw = [chooser.gauss(0.0, 1.0) for _ in range(dimensions)]
    norm = math.sqrt(sum(value * value for value in raw)) or 1.0
    return [round(value / norm, 7) for value in raw]


def _stable_int(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
