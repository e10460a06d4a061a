"""Bad requests from the network: the limiter on a patched clock, and what the log keeps."""

from __future__ import annotations

import logging

import pytest
from aiohttp import http_exceptions as bad
from aiohttp.web_protocol import RequestPayloadError

from backend.core.bad_requests import BadRequestLimiter, BadRequestLog, describe, peer_name
from tests.fakes import FakeClock

JUNK = "G\x00T /etc/passwd"


def _limiter(clock: FakeClock, **limits: int) -> BadRequestLimiter:
    return BadRequestLimiter(clock.monotonic, per_peer_s=10.0, **limits)


def test_one_line_a_peer_per_interval_and_the_next_line_counts_the_rest() -> None:
    clock = FakeClock()
    limiter = _limiter(clock)
    assert limiter.admit("10.0.0.9") == 0
    assert [limiter.admit("10.0.0.9") for _ in range(5)] == [None] * 5
    assert limiter.admit("10.0.0.8") == 5  # another peer is not held back
    clock.now += 9.9
    assert limiter.admit("10.0.0.9") is None
    clock.now += 0.1
    assert limiter.admit("10.0.0.9") == 1


def test_the_global_cap_holds_across_peers_until_the_minute_is_over() -> None:
    clock = FakeClock()
    limiter = _limiter(clock, per_minute=3)
    admitted = [limiter.admit(f"10.0.0.{n}") for n in range(100)]
    assert admitted[:3] == [0, 0, 0]
    assert admitted[3:] == [None] * 97
    clock.now += 60.0
    assert limiter.admit("10.0.1.1") == 97


def test_the_peers_remembered_are_bounded() -> None:
    clock = FakeClock()
    limiter = _limiter(clock, per_minute=10**6, max_peers=8)
    for n in range(1000):
        limiter.admit(f"fd00::{n:x}")
    assert len(limiter._last_line) <= 8
    clock.now += 10.0
    limiter.admit("10.0.0.1")
    assert list(limiter._last_line) == ["10.0.0.1"]  # the expired ones are forgotten


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (bad.BadHttpMethod(JUNK), "BadHttpMethod (invalid HTTP method)"),
        (bad.BadStatusLine(JUNK), "BadStatusLine (invalid request line)"),
        (bad.LineTooLong(JUNK * 100, "8190"), "LineTooLong (line too long)"),
        (bad.InvalidHeader(JUNK), "InvalidHeader (invalid header)"),
        (bad.BadHttpMessage(JUNK), "BadHttpMessage (malformed request)"),
        (RequestPayloadError(JUNK), "RequestPayloadError (invalid body)"),
    ],
)
def test_a_bad_request_is_described_by_its_kind_never_its_bytes(
    exc: BaseException, text: str
) -> None:
    assert describe(exc) == text


def test_a_body_error_is_described_by_its_cause() -> None:
    exc = RequestPayloadError(JUNK)
    exc.__cause__ = bad.ContentEncodingError(JUNK)
    assert describe(exc) == "ContentEncodingError (invalid body)"


def test_a_peer_is_named_only_by_an_address() -> None:
    assert peer_name("10.0.0.9") == "10.0.0.9"
    assert peer_name("fe80::1") == "fe80::1"
    assert peer_name(None) == "an unknown address"
    assert peer_name(JUNK) == "an unknown address"


class _Recorder(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__()
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _capture(name: str) -> tuple[logging.Logger, list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []
    logger = logging.getLogger(name)
    logger.handlers[:] = [_Recorder(records)]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, records


def _records() -> tuple[BadRequestLog, list[logging.LogRecord], list[logging.LogRecord]]:
    into, lines = _capture("test.bad_requests.into")
    server, passed = _capture("test.bad_requests.server")
    return BadRequestLog("node API", into, logger=server), lines, passed


def test_aiohttp_s_parse_errors_become_one_short_line_without_a_traceback() -> None:
    bad_requests, lines, passed = _records()
    for _ in range(50):
        # How aiohttp's RequestHandler.handle_error logs one (debug for a first bad method).
        bad_requests.exception(
            "Error handling request from %s", "10.0.0.9", exc_info=bad.BadHttpMethod(JUNK)
        )
        bad_requests.debug(
            "Error handling request from %s", "10.0.0.9", exc_info=bad.LineTooLong(JUNK, "1")
        )
    assert passed == []
    assert [(r.levelno, r.getMessage(), r.exc_info) for r in lines] == [
        (
            logging.WARNING,
            "node API: bad request from 10.0.0.9: BadHttpMethod (invalid HTTP method)",
            None,
        )
    ]


def test_a_body_error_seen_twice_is_one_bad_request() -> None:
    bad_requests, lines, passed = _records()
    exc = RequestPayloadError(JUNK)
    bad_requests.bad_request("10.0.0.9", exc)  # the handler that read the body
    bad_requests.exception("Unhandled exception", exc_info=exc)  # aiohttp draining the rest
    bad_requests.bad_request("10.0.0.8", RequestPayloadError(JUNK))
    assert [r.getMessage() for r in lines] == [
        "node API: bad request from 10.0.0.9: RequestPayloadError (invalid body)",
        "node API: bad request from 10.0.0.8: RequestPayloadError (invalid body)",
    ]
    assert passed == []


def test_an_internal_error_still_logs_with_its_traceback() -> None:
    bad_requests, lines, passed = _records()
    try:
        raise RuntimeError("handler bug")
    except RuntimeError as exc:
        bad_requests.exception("Error handling request from %s", "10.0.0.9", exc_info=exc)
    bad_requests.exception("Unhandled exception", exc_info=KeyError("x"))
    assert lines == []
    assert [(r.levelno, r.getMessage()) for r in passed] == [
        (logging.ERROR, "Error handling request from 10.0.0.9"),
        (logging.ERROR, "Unhandled exception"),
    ]
    assert all(r.exc_info is not None for r in passed)
