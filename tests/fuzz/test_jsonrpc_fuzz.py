"""JSON-RPC input through the real framing, classification, params conversion and a real
``RpcPeer`` serving a ``Dispatcher`` that routes every declared method: every frame is answered
with a well-formed response carrying a standard code (or, for notifications and responses,
nothing), never an internal error, and the connection keeps serving."""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import tracemalloc
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from hypothesis import given

from backend.core.rpc import Dispatcher
from backend.protocol import errors, jsonrpc, methods
from backend.protocol.contract import Method, NoParams
from backend.protocol.framing import FrameSplitter, OversizedFrame
from backend.protocol.peer import RpcPeer
from tests.fuzz import strategies as fuzz
from tests.fuzz.budget import EXAMPLES, fuzz_settings, measured, timeout_for

METHODS: list[Method[Any, Any]] = sorted(
    (item for item in vars(methods).values() if isinstance(item, Method)),
    key=lambda method: method.name,
)
NO_PARAMS = [method for method in METHODS if method.params is NoParams]
MAX_FRAME = 4096
# Codes a client may be sent for input it got wrong; -32603 would mean the server broke.
CLEAN_CODES = {
    jsonrpc.PARSE_ERROR,
    jsonrpc.INVALID_REQUEST,
    jsonrpc.METHOD_NOT_FOUND,
    jsonrpc.INVALID_PARAMS,
}
SENTINEL = b'{"jsonrpc":"2.0","id":"sentinel","method":"ping"}\n'


def _dispatcher() -> Dispatcher:
    dispatcher = Dispatcher()

    async def echo(params: Any, _: RpcPeer) -> Any:
        return msgspec.to_builtins(params)

    for method in METHODS:
        dispatcher.add(method, echo)
    return dispatcher


DISPATCHER = _dispatcher()


# Inputs -----------------------------------------------------------------------------------


def _id(rng: random.Random) -> Any:
    return rng.choice(
        [None, True, 1.5, [], {}, -(2**70), rng.randint(-5, 2**64), fuzz.text(rng, 6), "", 0]
    )


def _call(rng: random.Random) -> dict[str, Any]:
    """A request-like object with each member possibly wrong."""
    frame: dict[str, Any] = {}
    if rng.random() < 0.9:
        frame["jsonrpc"] = "2.0" if rng.random() < 0.85 else fuzz.scalar(rng)
    if rng.random() < 0.8:
        frame["id"] = _id(rng)
    if rng.random() < 0.9:
        roll = rng.random()
        if roll < 0.6:
            frame["method"] = rng.choice(METHODS).name
        elif roll < 0.8:
            frame["method"] = fuzz.text(rng, 12)
        else:
            frame["method"] = fuzz.value(rng, 1)
    if rng.random() < 0.7:
        frame["params"] = fuzz.value(rng, 3)
    if rng.random() < 0.1:
        frame[rng.choice(["result", "error"])] = fuzz.value(rng, 2)
    return frame


def _valid(rng: random.Random, n: int) -> tuple[bytes, str]:
    """A request that must be answered with a result under its id."""
    request_id = f"valid-{n}"
    params: dict[str, Any] | None = rng.choice([None, {}])
    if rng.random() < 0.3:
        frame = jsonrpc.request(request_id, methods.LOG_SET_LEVEL.name, {"level": "debug"})
    else:
        frame = jsonrpc.request(request_id, rng.choice(NO_PARAMS).name, params)
    return jsonrpc.encode(frame)[:-1], request_id


def _frame(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.4:
        return fuzz.encode(rng, _call(rng))
    if roll < 0.5:
        return fuzz.encode(rng, [_call(rng) for _ in range(rng.randint(0, 5))])
    if roll < 0.6:
        return fuzz.encode(rng, fuzz.value(rng, 3))
    if roll < 0.75:
        return fuzz.mutate(rng, fuzz.encode(rng, _call(rng)))
    if roll < 0.8:
        return b"x" * rng.randint(MAX_FRAME - 2, MAX_FRAME + 2)
    if roll < 0.85:
        return fuzz.deep(rng, max_depth=5000)
    if roll < 0.9:
        return rng.randbytes(rng.randint(0, 40))
    return rng.choice([b"", b" ", b"\r", b"[]", b"null", b"{}", b"\xef\xbb\xbf{}", b"\x00"])


def make_stream(rng: random.Random) -> tuple[list[bytes], set[str]]:
    """Chunks of a byte stream, and the ids of the valid requests in it."""
    parts: list[bytes] = []
    expected: set[str] = set()
    for n in range(rng.randint(1, 6)):
        if rng.random() < 0.2:
            frame, request_id = _valid(rng, n)
            expected.add(request_id)
            parts.append(b"\n" + frame + b"\n")
        else:
            parts.append(_frame(rng) + (b"\n" if rng.random() < 0.9 else b""))
    data = b"".join(parts) + b"\n" + SENTINEL
    cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randint(0, 4)))
    chunks = [data[start:end] for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return [chunk for chunk in chunks if chunk], expected


# The peer -----------------------------------------------------------------------------------


class Sink:
    """The write side of an ``RpcPeer``, keeping what it is sent."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.transport = self

    def abort(self) -> None:
        """Nothing to drop."""

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        """Never full."""

    def close(self) -> None:
        """Nothing to close."""


async def serve(chunks: list[bytes]) -> bytes:
    """Everything the peer answers to ``chunks`` followed by EOF (bounded in time)."""
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    reader.feed_eof()
    sink = Sink()
    peer = RpcPeer(reader, sink, name="fuzz", on_request=DISPATCHER, max_frame=MAX_FRAME)
    async with asyncio.timeout(5):
        await peer.run()
    return bytes(sink.data)


def _responses(output: bytes) -> Iterator[dict[str, Any]]:
    assert output.endswith(b"\n")
    for line in output[:-1].split(b"\n"):
        frame = msgspec.json.decode(line)
        if isinstance(frame, list):
            assert frame, "an empty batch answer"
            yield from frame
        else:
            yield frame


def check_answers(output: bytes, expected: set[str]) -> None:
    """Every answer is a well-formed response with a clean code; valid requests got results."""
    results: set[Any] = set()
    for response in _responses(output):
        assert isinstance(response, dict) and response.get("jsonrpc") == "2.0", response
        assert set(response) in ({"jsonrpc", "id", "result"}, {"jsonrpc", "id", "error"})
        assert response["id"] is None or isinstance(response["id"], int | str)
        assert not isinstance(response["id"], bool)
        if "error" in response:
            error = response["error"]
            assert set(error) <= {"code", "message", "data"}, error
            assert error["code"] in CLEAN_CODES, error
            assert isinstance(error["message"], str) and error["message"], error
        else:
            results.add(response["id"])
    assert expected | {"sentinel"} <= results


@timeout_for(EXAMPLES, 0.05)
def test_peer_answers_every_stream_cleanly(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="backend.protocol.peer")  # "discarded a frame" lines
    # Over 10^5 inputs the process grows by ~700 MiB, Hypothesis's bookkeeping and the heap's
    # fragmentation by inputs up to 150 kB: test_peer_keeps_nothing_across_streams shows the
    # peer itself keeps nothing.
    with (
        asyncio.Runner() as runner,
        measured("jsonrpc-peer", peak_limit=32 << 20, rss_growth_limit=1 << 30) as bounds,
    ):

        @fuzz_settings()
        @given(fuzz.rngs)
        def run(rng: fuzz.SeededRandom) -> None:
            chunks, expected = make_stream(rng)
            with bounds.example():
                output = runner.run(serve(chunks))
                check_answers(output, expected)

        run()


def test_peer_keeps_nothing_across_streams(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="backend.protocol.peer")
    with asyncio.Runner() as runner:
        runner.run(serve(make_stream(random.Random(0))[0]))  # first-use caches
        gc.collect()
        tracemalloc.start()
        try:
            for seed in range(1, 1001):
                runner.run(serve(make_stream(random.Random(seed))[0]))
            gc.collect()
            kept = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
    assert kept < 512 << 10, f"1,000 streams left {kept} bytes behind"


# Pure pieces --------------------------------------------------------------------------------


def _reference_frames(data: bytes, max_frame: int) -> list[bytes | OversizedFrame]:
    pieces = data.split(b"\n")
    frames: list[bytes | OversizedFrame] = []
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        if last and not piece.strip() and len(piece) <= max_frame:
            break
        frames.append(OversizedFrame(len(piece)) if len(piece) > max_frame else piece)
    return frames


@timeout_for(EXAMPLES, 0.05)
def test_splitter_frames_any_chunking_like_split() -> None:
    with measured("framing", peak_limit=8 << 20) as bounds:

        @fuzz_settings()
        @given(fuzz.rngs)
        def run(rng: fuzz.SeededRandom) -> None:
            chunks, _ = make_stream(rng)
            max_frame = rng.choice([1, 16, 300, MAX_FRAME])
            with bounds.example():
                splitter = FrameSplitter(max_frame)
                frames: list[bytes | OversizedFrame] = []
                for chunk in chunks:
                    frames += splitter.feed(chunk)
                    assert len(splitter._buffer) <= max_frame
                frames += splitter.finish()
                assert frames == _reference_frames(b"".join(chunks), max_frame)

        run()


def _classify_cleanly(frame: bytes) -> None:
    try:
        decoded = jsonrpc.decode_frame(frame)
    except ValueError:
        return  # the peer answers -32700 with this message
    for item in decoded if isinstance(decoded, list) else [decoded]:
        message = jsonrpc.classify(item)
        if isinstance(message, jsonrpc.Invalid):
            assert message.error.code == jsonrpc.INVALID_REQUEST
            jsonrpc.encode(jsonrpc.error_response(message.id, message.error))
        elif isinstance(message, jsonrpc.Request):
            assert isinstance(message.id, int | str) and not isinstance(message.id, bool)
            assert isinstance(message.method, str) and message.method
            _convert_cleanly(message.method, message.params)


def _convert_cleanly(name: str, params: Any) -> None:
    method = next((method for method in METHODS if method.name == name), None)
    if method is None:
        return
    try:
        method.convert_params(params)
    except errors.InvalidParams as exc:
        message = exc.message
        assert name in message


@timeout_for(EXAMPLES, 0.05)
def test_frames_decode_and_classify_cleanly() -> None:
    with measured("jsonrpc-classify", peak_limit=16 << 20) as bounds:

        @fuzz_settings()
        @given(fuzz.rngs)
        def run(rng: fuzz.SeededRandom) -> None:
            frame = _frame(rng)
            with bounds.example():
                _classify_cleanly(frame)

        run()


@timeout_for(EXAMPLES, 0.05)
def test_params_of_every_method_convert_or_are_invalid() -> None:
    with measured("jsonrpc-params", peak_limit=16 << 20) as bounds:

        @fuzz_settings()
        @given(fuzz.rngs)
        def run(rng: fuzz.SeededRandom) -> None:
            method = rng.choice(METHODS)
            params = fuzz.value(rng, 4)
            if isinstance(params, dict) and rng.random() < 0.5:
                params = fuzz.replace_somewhere(rng, params, fuzz.value(rng, 2))
            try:  # only what the wire can carry (no lone surrogates, no NaN)
                params = jsonrpc.decode_frame(fuzz.encode(rng, params))
            except ValueError:
                return
            with bounds.example():
                _convert_cleanly(method.name, params)

        run()


# Regressions found by the fuzz tests ---------------------------------------------------------


@pytest.mark.parametrize("depth", [1_200, 2_000, 100_000])
def test_deeply_nested_frame_is_a_parse_error(depth: int) -> None:
    # msgspec raised RecursionError, which ended the connection's read loop.
    frame = b"[" * depth + b"]" * depth
    with pytest.raises(ValueError, match="nested too deeply"):
        jsonrpc.decode_frame(frame)
    if len(frame) > MAX_FRAME:
        return  # the fuzzed peer's frame limit refuses it before decoding
    chunks = [frame + b"\n" + SENTINEL]
    output = asyncio.run(serve(chunks))
    answers = list(_responses(output))
    assert answers[0]["error"]["code"] == jsonrpc.PARSE_ERROR
    check_answers(output, set())
