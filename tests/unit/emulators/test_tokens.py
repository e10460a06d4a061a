"""Deterministic text of the engine emulators (standing in for real models): replies, stop
strings, length caps, token counts and embeddings."""

from __future__ import annotations

import math

from backend.devtools.emulators.tokens import (
    count_tokens,
    embedding,
    natural_length,
    plan_reply,
    reply_seed,
    token_ids,
)


def test_emulator_reply_is_the_same_for_the_same_seed_and_differs_otherwise() -> None:
    first = plan_reply(42, natural_tokens=12)
    assert first == plan_reply(42, natural_tokens=12)
    assert first != plan_reply(43, natural_tokens=12)
    assert len(first.tokens) == 12 and first.done_reason == "stop"
    assert first.tokens[0][0].isupper() and first.text.endswith(".")
    assert all(token.startswith(" ") for token in first.tokens[1:])


def test_emulator_num_predict_caps_the_reply_with_reason_length() -> None:
    capped = plan_reply(7, natural_tokens=10, num_predict=3)
    assert (len(capped.tokens), capped.done_reason) == (3, "length")
    assert plan_reply(7, natural_tokens=10, num_predict=10).done_reason == "stop"
    assert plan_reply(7, natural_tokens=10, num_predict=-1).done_reason == "stop"


def test_emulator_stop_string_cuts_inside_a_token_and_is_not_included() -> None:
    full = plan_reply(5, natural_tokens=10)
    marker = full.text[8:11]
    cut = plan_reply(5, natural_tokens=10, stop=("zzz-never", marker))
    assert cut.text == full.text[: full.text.find(marker)]
    assert cut.done_reason == "stop" and marker not in cut.text


def test_emulator_stop_after_the_length_cap_still_ends_with_length() -> None:
    full = plan_reply(9, natural_tokens=20)
    late_marker = full.tokens[-1]
    capped = plan_reply(9, natural_tokens=20, num_predict=2, stop=(late_marker,))
    assert capped.done_reason == "length" and len(capped.tokens) == 2


def test_emulator_seed_and_length_derivation() -> None:
    assert reply_seed("m", "p", 5) == 5
    assert reply_seed("m", "p", None) == reply_seed("m", "p", None) != reply_seed("m", "q", None)
    assert all(8 <= natural_length(seed, None) <= 24 for seed in range(100))
    assert natural_length(3, 50) == 50


def test_emulator_token_counting_and_ids_are_stable() -> None:
    assert count_tokens("Hello, world!") == 4
    assert count_tokens("") == 0
    assert token_ids("a b") == token_ids("a b") and len(token_ids("a b c")) == 3


def test_emulator_embeddings_are_unit_vectors_equal_for_equal_text() -> None:
    vector = embedding("text", 64)
    assert len(vector) == 64 and math.isclose(sum(v * v for v in vector), 1.0, rel_tol=1e-5)
    assert vector == embedding("text", 64) != embedding("other", 64)
