"""The broker's end of the custody channel (``backend/protocol/custody.py``): it keeps a copy
of every waiting front-door request's connection while the worker holds it, and gives the
ones a dead worker left to the next worker."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable

import msgspec

from backend.core.fd_channel import FdChannel, channel_pair
from backend.protocol import custody
from backend.protocol.custody import Held, Released

log = logging.getLogger(__name__)

# A job's last event number and attempt, as the broker's job list has them (None: not open).
Progress = Callable[[str], tuple[int, int] | None]


class Kept(msgspec.Struct, frozen=True):
    """A held request: its record and our copies of its two descriptors."""

    record: Held
    fds: tuple[int, int]

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


class CustodyDesk:
    """One channel per worker run. ``open()`` makes the next run's channel and hands it what
    the last run left; ``worker_gone()`` reads the dead run's last messages and keeps what it
    still held, for the next."""

    def __init__(self, progress: Progress = lambda job: None) -> None:
        self._progress = progress
        self._channel: FdChannel | None = None
        self._theirs: socket.socket | None = None
        self._held: dict[int, Kept] = {}
        self._left: list[Kept] = []  # held by a worker that died, for the next one

    def open(self) -> socket.socket | None:
        """The worker's end of a new channel (None where descriptors cannot be passed). What
        the last worker left is sent on it at once; the kernel keeps it until the worker
        reads it."""
        self._close_channel()
        pair = channel_pair()
        if pair is None:
            return None
        ours, theirs = pair
        self._channel, self._theirs = FdChannel(ours, self._on_message), theirs
        self._channel.start()
        left, self._left = self._left, []
        for kept in left:
            self._channel.send(custody.encode(self._caught_up(kept.record)), list(kept.fds))
            kept.close()  # the channel (or the kernel) has its own copies now
        if left:
            log.info("giving the new proxy worker %d request(s) the last one held", len(left))
        return theirs

    def _caught_up(self, record: Held) -> Held:
        """The record with the job's last event and attempt as the broker saw them (the dead
        worker may have tried it after holding it, and its last events may never have left
        it: the next events must follow exactly those the broker has)."""
        progress = self._progress(record.job)
        if progress is None:  # it never reached the broker: its events start afresh
            return msgspec.structs.replace(record, seq=0)
        seq, attempt = progress
        return msgspec.structs.replace(
            record, seq=max(seq, record.seq), attempt=max(attempt, record.attempt)
        )

    def worker_gone(self) -> frozenset[str]:
        """The worker exited: read what it sent last, keep what it still held; their jobs (a
        job with a kept request is not over)."""
        if self._channel is not None:
            self._channel.drain()
        self._close_channel()
        self._left += self._held.values()
        self._held = {}
        return frozenset(kept.record.job for kept in self._left)

    @property
    def held(self) -> int:
        """How many requests the running worker holds with us."""
        return len(self._held)

    def close(self) -> None:
        """Shut down: let go of everything (those clients see their connection close)."""
        self._close_channel()
        for kept in [*self._held.values(), *self._left]:
            kept.close()
        self._held, self._left = {}, []

    def _close_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._theirs is not None:
            self._theirs.close()
            self._theirs = None

    def _on_message(self, data: bytes, fds: list[int]) -> None:
        try:
            message = custody.decode(data)
        except ValueError as exc:
            log.error("ignoring a malformed custody message from the proxy worker: %s", exc)
            _close_all(fds)
            return
        if isinstance(message, Released):
            _close_all(fds)
            kept = self._held.pop(message.number, None)
            if kept is not None:
                kept.close()
            return
        if len(fds) != 2:
            log.error("ignoring a held request that came without its connection")
            _close_all(fds)
            return
        previous = self._held.pop(message.number, None)
        if previous is not None:
            previous.close()
        self._held[message.number] = Kept(message, (fds[0], fds[1]))


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
