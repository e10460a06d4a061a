"""Out-of-descriptor errors from the loop: a burst is a bounded number of lines, not tracebacks."""

from __future__ import annotations

import asyncio
import errno
import logging

import pytest

from backend.core.loop_errors import AcceptErrorLog, install_accept_error_log
from tests.fakes import FakeClock

ACCEPT_FAILED = "socket.accept() out of system resource"


def _emfile() -> OSError:
    return OSError(errno.EMFILE, "Too many open files")


async def test_a_burst_of_accept_errors_is_one_line_and_then_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    into = logging.getLogger("test.loop_errors")
    handler = AcceptErrorLog(into, clock=clock.monotonic, interval_s=10.0)
    loop = asyncio.get_running_loop()
    with caplog.at_level(logging.INFO, logger="test.loop_errors"):
        for _ in range(200_000):
            handler(loop, {"message": ACCEPT_FAILED, "exception": _emfile()})
        clock.now += 10.0
        handler(loop, {"message": ACCEPT_FAILED, "exception": _emfile()})
    lines = [r for r in caplog.records if r.name == "test.loop_errors"]
    assert len(lines) == 2
    assert all(r.exc_info is None for r in lines)
    assert "Too many open files" in lines[0].getMessage() and ": 1 time(s)" in lines[0].getMessage()
    assert ": 200000 time(s)" in lines[1].getMessage()


async def test_the_count_of_a_burst_that_stopped_is_written_by_the_timer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    into = logging.getLogger("test.loop_errors")
    handler = AcceptErrorLog(into, interval_s=0.05)
    loop = asyncio.get_running_loop()
    with caplog.at_level(logging.INFO, logger="test.loop_errors"):
        for _ in range(50):
            handler(loop, {"message": ACCEPT_FAILED, "exception": _emfile()})
        await asyncio.sleep(0.2)
    counts = [r.getMessage() for r in caplog.records if r.name == "test.loop_errors"]
    assert len(counts) == 2 and ": 49 time(s)" in counts[1]


async def test_other_errors_reach_the_default_handler(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    install_accept_error_log(logging.getLogger("test.loop_errors"))
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            loop.call_exception_handler({"message": "boom", "exception": ValueError("x")})
    finally:
        loop.set_exception_handler(previous)
    assert any(r.name == "asyncio" and "boom" in r.getMessage() for r in caplog.records)
