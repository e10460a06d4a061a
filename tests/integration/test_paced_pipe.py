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

# Writes a line every 0.5 s: fifty paces of 0.01 s apart (a read must come 0.4 s late for
# two of them to look close).
QUIET_WRITER = """
import os, time
for n in range(3):
    time.sleep(0.5)
    os.write(1, b"beat %d\\n" % n)
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
    # Unpaced, each write is a read of its own (60); paced, one read per pace at most once
    # reads follow each other (the first after a quiet pipe is not held back).
    assert 3 <= len(recorder.reads) <= lines // 4
    gaps = [later - earlier for earlier, later in itertools.pairwise(recorder.reads)]
    assert min(gaps[1:]) >= pace * 0.9


async def test_a_message_after_a_quiet_spell_is_read_without_a_pace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pipe written now and then (a heartbeat's answer at rest) is read as it comes, with no
    pause after it: no timer wakes the reader a second time per message."""
    recorder = Recorder(monkeypatch)
    resumes: list[float] = []
    original = paced_pipe.PacedStdout._read_again

    def noted(self: paced_pipe.PacedStdout) -> None:
        resumes.append(time.monotonic())
        original(self)

    monkeypatch.setattr(paced_pipe.PacedStdout, "_read_again", noted)
    process = await spawn_paced(
        [sys.executable, "-c", QUIET_WRITER], pace=0.01, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    got: list[bytes] = []
    while line := await process.stdout.readline():
        got.append(line)
    assert await process.wait() == 0
    assert got == [b"beat 0\n", b"beat 1\n", b"beat 2\n"]
    assert len(recorder.reads) == 3
    assert resumes == []  # never paused


async def test_what_a_child_wrote_just_before_exiting_is_read_before_wait_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The child exits while the pipe is unwatched: its last lines are still read, then EOF."""
    recorder = Recorder(monkeypatch)
    got, code = await run_writer(3, pace=0.5)
    assert code == 0
    assert got == [b"line 0\n", b"line 1\n", b"line 2\n"]
    # The first lines as they come (a read soon after another starts the pacing), the last
    # after the pace.
    assert 2 <= len(recorder.reads) <= 3


async def test_without_a_pace_every_write_is_read_as_it_comes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = Recorder(monkeypatch)
    got, code = await run_writer(20, pace=0)
    assert (code, len(got)) == (0, 20)
    assert recorder.reads == []  # the plain asyncio protocol, not the paced one
