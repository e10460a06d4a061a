"""Frame splitting: whole, split, partial, oversized, many-per-chunk."""

from backend.protocol.framing import FrameSplitter, OversizedFrame


def test_frames_split_across_chunks_are_joined() -> None:
    splitter = FrameSplitter()
    assert splitter.feed(b'{"a":') == []
    assert splitter.feed(b"1}\n{") == [b'{"a":1}']
    assert splitter.feed(b'"b":2}\n') == [b'{"b":2}']


def test_many_frames_in_one_chunk_keep_their_order() -> None:
    splitter = FrameSplitter()
    assert splitter.feed(b"1\n2\n3\n") == [b"1", b"2", b"3"]


def test_oversized_frame_is_reported_and_the_next_frame_survives() -> None:
    splitter = FrameSplitter(max_frame=10)
    frames = splitter.feed(b"x" * 8)
    frames += splitter.feed(b"y" * 8)
    frames += splitter.feed(b"z" * 100 + b"\nok\n")
    assert frames == [OversizedFrame(116), b"ok"]


def test_oversized_frame_never_buffers_beyond_the_limit() -> None:
    splitter = FrameSplitter(max_frame=1000)
    for _ in range(100):
        splitter.feed(b"a" * 999)
    assert len(splitter._buffer) == 0
    assert splitter.feed(b"\n") == [OversizedFrame(99_900)]


def test_frame_of_exactly_the_limit_is_accepted() -> None:
    splitter = FrameSplitter(max_frame=4)
    assert splitter.feed(b"abcd\nabcde\n") == [b"abcd", OversizedFrame(5)]


def test_partial_frame_at_end_of_stream_is_returned() -> None:
    splitter = FrameSplitter()
    splitter.feed(b'{"jsonrpc":"2.0"')
    assert splitter.finish() == [b'{"jsonrpc":"2.0"']
    assert splitter.finish() == []
