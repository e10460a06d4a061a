"""A paced child stdout: read in bursts at most one pace apart, nothing lost, read to its end."""

from __future__ import annotations

import asyncio
import itertools
import sys
import time

import pytest

from backend.core import paced_pipe
from backend.core.paced_pipe import spawn_paced

# Writes a numbered line every 5 ms, each one write (as a worker's job end is), then exits.
WRITER = """
import os, sys, time
for n in range(int(sys.argv[1])):
    os.write(1, b"line %d\\n" % n)
    time.sleep(0.005)
"""


class Recorder:
    """Wraps ``PacedStdout.pipe_data_received`` to note when each read of stdout happened."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[float] = []
        original = paced_pipe.PacedStdout.pipe_data_received
        reads = self.reads

        def noted(self: paced_pipe.PacedStdout, fd: int, data: bytes | str) -> None:
            if fd == paced_pipe.STDOUT:
                reads.append(time.monotonic())
            original(self, fd, data)

        monkeypatch.setattr(paced_pipe.PacedStdout, "pipe_data_received", noted)


async def run_writer(lines: int, pace: float) -> tuple[list[bytes], int]:
    process = await spawn_paced(
        [sys.executable, "-c", WRITER, str(lines)],
        pace=pace,
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    got: list[bytes] = []
    while line := await process.stdout.readline():
        got.append(line)
    return got, await process.wait()


async def test_paced_stdout_is_read_in_bursts_whole_and_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = Recorder(monkeypatch)
    lines = 60  # some 300 ms of writes, one every 5 ms
    pace = 0.1
    got, code = await run_writer(lines, pace)
    assert code == 0
    assert got == [b"line %d\n" % n for n in range(lines)]
    # Unpaced, each write is a read of its own (60); paced, one read per pace at most.
    assert 2 <= len(recorder.reads) <= lines // 4
    gaps = [later - earlier for earlier, later in itertools.pairwise(recorder.reads)]
    assert min(gaps) >= pace * 0.9


async def test_what_a_child_wrote_just_before_exiting_is_read_before_wait_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The child exits while the pipe is unwatched: its last lines are still read, then EOF."""
    recorder = Recorder(monkeypatch)
    got, code = await run_writer(3, pace=0.5)
    assert code == 0
    assert got == [b"line 0\n", b"line 1\n", b"line 2\n"]
    assert len(recorder.reads) == 2  # the first line at once, the rest after the pace


async def test_without_a_pace_every_write_is_read_as_it_comes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = Recorder(monkeypatch)
    got, code = await run_writer(20, pace=0)
    assert (code, len(got)) == (0, 20)
    assert recorder.reads == []  # the plain asyncio protocol, not the paced one
