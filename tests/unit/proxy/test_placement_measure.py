"""What the router learns from responses: records, Ollama's own counts, moving averages."""

from __future__ import annotations

import json

import pytest

from backend.workers.proxy.routing.placement.measure import ALPHA, OutputMeter, SpeedBook


def test_ndjson_records_are_counted_and_timed_across_chunk_boundaries() -> None:
    meter = OutputMeter()
    meter.feed(b'{"message": {"content": "a"}}\n{"mess', 10.0)
    meter.feed(b'age": {"content": "b"}}\n', 10.5)
    meter.feed(b'{"message": {"content": "c"}}\n', 11.0)
    assert meter.generation() == (2, pytest.approx(1.0))


def test_sse_counts_data_records_but_not_done_or_comments() -> None:
    meter = OutputMeter()
    for index, at in enumerate((1.0, 1.25, 1.5)):
        meter.feed(f'data: {{"n": {index}}}\n\n'.encode(), at)
    meter.feed(b": keep-alive\n\ndata: [DONE]\n\n", 9.0)
    assert meter.generation() == (2, pytest.approx(0.5))


def test_sse_records_cut_by_chunk_boundaries_and_data_inside_text_count_once() -> None:
    meter = OutputMeter()
    meter.feed(b'data: {"t": "data: x"}\n\nda', 1.0)  # "data:" in the text is no record
    meter.feed(b'ta: {"t": "y"}\n', 2.0)  # the field cut after "da"
    meter.feed(b"\n", 2.5)
    meter.feed(b'data: {"t": "z"}\n\ndata: [DO', 3.0)  # [DONE] cut in two: no record
    meter.feed(b"NE]\n\n", 9.0)
    assert (meter.records, meter.generation()) == (3, (2, pytest.approx(2.0)))


def test_ollamas_final_record_gives_its_own_counts() -> None:
    meter = OutputMeter()
    final = {"done": True, "eval_count": 120, "eval_duration": 2_000_000_000}
    meter.feed(b'{"response": "x"}\n' + json.dumps(final).encode() + b"\n", 5.0)
    assert meter.generation() == (120, pytest.approx(2.0))
    whole = OutputMeter()  # a non-streamed answer: one JSON body, no newline
    whole.feed(json.dumps(final).encode(), 5.0)
    assert whole.generation() == (120, pytest.approx(2.0))


def test_one_record_says_nothing_of_speed() -> None:
    meter = OutputMeter()
    meter.feed(b'{"response": "x"}\n', 1.0)
    assert meter.generation() is None


def test_the_book_keeps_moving_averages_and_the_answer_length() -> None:
    book = SpeedBook()
    book.generated("a", "m", tokens=100, seconds=2.0, now=10.0)
    book.generated("a", "m", tokens=300, seconds=3.0, now=20.0)
    pace = book.pace("a", "m", now=25.0)
    assert pace.tokens_per_s == pytest.approx(ALPHA * 100 + (1 - ALPHA) * 50)
    assert pace.age_s == pytest.approx(5.0)
    assert book.answer_tokens("m") == pytest.approx(ALPHA * 300 + (1 - ALPHA) * 100)
    assert book.pace("b", "m", now=25.0).tokens_per_s is None


def test_the_book_is_bounded() -> None:
    book = SpeedBook(capacity=2)
    for index, node in enumerate(("a", "b", "c")):
        book.generated(node, "m", tokens=10, seconds=1.0, now=float(index))
    assert book.pace("a", "m", now=3.0).tokens_per_s is None
    assert book.pace("c", "m", now=3.0).tokens_per_s == pytest.approx(10.0)
