"""Whether a response ended with its format's final marker, or was cut short."""

from __future__ import annotations

import json

from backend.workers.proxy.upstream.markers import LINE_CAP, EndMarker

NDJSON = "application/x-ndjson"
SSE = "text/event-stream; charset=utf-8"


def _marker(content_type: str, *chunks: bytes) -> EndMarker:
    marker = EndMarker(content_type)
    for chunk in chunks:
        marker.feed(chunk)
    return marker


def _line(**fields: object) -> bytes:
    return json.dumps(fields).encode() + b"\n"


def test_ndjson_that_ends_with_the_done_line_is_complete() -> None:
    marker = _marker(
        NDJSON,
        _line(model="llama3", response="Hi", done=False),
        _line(model="llama3", response="", done=True, done_reason="stop"),
    )
    assert marker.complete()


def test_ndjson_cut_before_the_done_line_is_not_complete() -> None:
    marker = _marker(
        NDJSON,
        _line(model="llama3", response="Hi", done=False),
        _line(model="llama3", response=" there", done=False),
    )
    assert not marker.complete()


def test_ndjson_done_line_must_be_the_last_line() -> None:
    marker = _marker(NDJSON, _line(done=True), _line(response="late", done=False))
    assert not marker.complete()


def test_ndjson_ending_with_an_error_line_is_not_complete() -> None:
    marker = _marker(NDJSON, _line(response="Hi", done=False), _line(error="model crashed"))
    assert not marker.complete()


def test_ndjson_done_false_is_not_complete() -> None:
    assert not _marker(NDJSON, b'{"done": false}\n').complete()


def test_ndjson_blank_lines_after_the_done_line_do_not_matter() -> None:
    assert _marker(NDJSON, b'{"done" :  true}', b"\n\n  \n").complete()


def test_an_empty_ndjson_body_is_not_complete() -> None:
    assert not _marker(NDJSON).complete()
    assert not _marker(NDJSON, b"", b"\n").complete()


def test_ndjson_done_line_split_across_chunks_is_seen() -> None:
    line = _line(model="llama3", response="", done=True)
    marker = _marker(NDJSON, _line(response="Hi", done=False), line[:30])
    assert not marker.complete()
    marker.feed(line[30:])
    assert marker.complete()


def test_ndjson_one_byte_at_a_time_is_seen() -> None:
    body = _line(response="Hi", done=False) + _line(response="", done=True)
    marker = _marker(NDJSON, *(body[i : i + 1] for i in range(len(body))))
    assert marker.complete()


def test_sse_ending_with_data_done_is_complete() -> None:
    marker = _marker(
        SSE,
        b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n',
        b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n',
        b"data: [DONE]\n\n",
    )
    assert marker.complete()


def test_sse_cut_before_data_done_is_not_complete() -> None:
    marker = _marker(
        SSE,
        b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n',
        b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n',
    )
    assert not marker.complete()


def test_llama_server_native_stream_ends_with_stop_true() -> None:
    running = _marker(SSE, b'data: {"content":"Hi","stop":false}\n\n')
    assert not running.complete()
    running.feed(b'data: {"content":"","stop":true,"timings":{"predicted_n":2}}\n\n')
    assert running.complete()


def test_anthropic_stream_ends_with_message_stop() -> None:
    events = (
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
        b'event: message_delta\ndata: {"type":"message_delta"}\n\n',
    )
    marker = _marker(SSE, *events)
    assert not marker.complete()
    marker.feed(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    assert marker.complete()


def test_sse_marker_split_across_chunks_is_seen() -> None:
    marker = _marker(SSE, b'data: {"choices":[]}\n\ndata: [DO')
    assert not marker.complete()
    marker.feed(b"NE]\n\n")
    assert marker.complete()


def test_content_type_is_matched_without_regard_to_case() -> None:
    assert not _marker("Text/Event-Stream", b'data: {"x":1}\n\n').complete()
    assert not _marker("APPLICATION/X-NDJSON", b'{"done":false}\n').complete()


def test_a_whole_json_body_is_always_complete() -> None:
    assert _marker("application/json", b'{"choices": [').complete()
    assert _marker("").complete()


def test_a_marker_followed_by_more_data_is_not_the_end() -> None:
    marker = _marker(SSE, b"data: [DONE]\n\n")
    assert marker.complete()
    marker.feed(b'data: {"x": 1}\n\n')
    assert not marker.complete()


def test_a_last_line_longer_than_the_cap_is_searched_not_parsed() -> None:
    head = b'{"done": true, "context": ['
    marker = _marker(NDJSON, head + b"1," * LINE_CAP + b"1]}\n")
    assert marker.complete()
    cut = _marker(NDJSON, b'{"done": false, "context": [' + b"1," * LINE_CAP)
    assert not cut.complete()


def test_a_marker_at_the_very_end_of_a_long_stream_is_seen() -> None:
    body = b'data: {"choices":[{"delta":{"content":"token"}}]}\n\n' * 2000
    marker = _marker(SSE, body, b"data: [DONE]\n\n")
    assert marker.complete()
    marker = _marker(NDJSON, _line(response="token", done=False) * 2000, _line(done=True))
    assert marker.complete()


def test_an_ollama_generate_done_line_longer_than_the_tail_is_complete() -> None:
    final = {
        "model": "llama3",
        "created_at": "2025-01-01T00:00:00Z",
        "response": "",
        "done": True,
        "done_reason": "stop",
        "context": list(range(128000, 128300)),
        "total_duration": 1_000_000,
        "eval_count": 12,
    }
    marker = _marker(NDJSON, _line(response="Hi", done=False), _line(**final))
    assert marker.complete()


def test_sse_content_that_mentions_the_marker_does_not_complete_a_cut_stream() -> None:
    delta = b'data: {"choices":[{"delta":{"content":"the stream ends with data: [DONE]"}}]}\n\n'
    marker = _marker(SSE, delta, b'data: {"choices":[{"delta":{"content":" and"}}]}\n\n')
    assert not marker.complete()


def test_ended_by_names_the_chunk_that_completes_a_stream() -> None:
    marker = EndMarker(NDJSON)
    first = _line(response="Hi", done=False)
    marker.feed(first)
    assert not marker.ended_by(first)
    last = _line(response="", done=True)
    marker.feed(last)
    assert marker.ended_by(last)


def test_ended_by_sees_an_sse_done_and_not_a_mention_of_it() -> None:
    marker = EndMarker(SSE)
    mention = b'data: {"choices": [{"delta": {"content": "say [DONE] now"}}]}\n\n'
    marker.feed(mention)
    assert not marker.ended_by(mention)
    done = b"data: [DONE]\n\n"
    marker.feed(done)
    assert marker.ended_by(done)


def test_ended_by_never_ends_a_whole_body() -> None:
    marker = EndMarker("application/json")
    body = b'{"done": true}'
    marker.feed(body)
    assert not marker.ended_by(body)
    assert marker.complete()  # its end is decided at the end of the body


def test_a_blank_chunk_after_whole_records_leaves_the_last_record_last() -> None:
    """Records a chunk each, then separators alone in their own chunks, as SSE engines send."""
    assert _marker(NDJSON, _line(done=False), _line(done=True), b"\n", b" \n").complete()
    assert not _marker(NDJSON, _line(done=True), _line(done=False), b"\n").complete()
    done = b'data: {"stop": true}\n'
    assert _marker(SSE, b'data: {"stop": false}\n', b"\n", done, b"\n").complete()
    assert not _marker(SSE, done, b"\n", b'data: {"stop": false}\n', b"\n").complete()


def test_whole_records_then_a_record_in_pieces_ends_with_the_pieces() -> None:
    marker = _marker(NDJSON, _line(done=False), b'{"do', b'ne": tr', b"ue}\n")
    assert marker.complete()
    marker = _marker(NDJSON, _line(done=True), b'{"done": fa', b"lse}")
    assert not marker.complete()
    assert marker.mid_line
    assert not _marker(NDJSON, _line(done=True)).mid_line
