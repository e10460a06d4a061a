"""The states of the GUI's link to the broker and how a broker session ended."""

from __future__ import annotations

import signal
from enum import StrEnum


class ServiceState(StrEnum):
    """What the user sees about the broker (the reference app's connector states, plus failed)."""

    CONNECTING = "connecting"  # starting or attaching; not yet ready
    READY = "ready"  # ``app:ready`` received (or, when attaching, ``ping`` answered)
    DISCONNECTED = "disconnected"  # the broker went away and this app did not start it again
    FAILED = "failed"  # an owned broker crashed more often than the restart budget allows


class Ownership(StrEnum):
    """Whether this app started the broker (and so stops it on quit) or attached to it."""

    OWNED = "owned"
    ATTACHED = "attached"


class Ending(StrEnum):
    """Why a session with a broker ended."""

    CRASHED = "crashed"  # an owned broker exited without being asked to
    STOPPED_ELSEWHERE = "stopped-elsewhere"  # an owned broker exited cleanly at someone's request
    ALREADY_RUNNING = "already-running"  # the spawned broker found another one for the data dir
    LOST = "lost"  # an attached broker's connection closed
    CLOSED = "closed"  # this app closed the session (restart, reconnect or quit)


EXIT_ALREADY_RUNNING = 3


def classify_exit(returncode: int, *, asked_to_stop: bool) -> Ending:
    """Sort an owned broker's exit: a signal or non-zero code is a crash unless we stopped it."""
    if asked_to_stop:
        return Ending.CLOSED
    if returncode == EXIT_ALREADY_RUNNING:
        return Ending.ALREADY_RUNNING
    if returncode == 0:
        return Ending.STOPPED_ELSEWHERE
    return Ending.CRASHED


def describe_exit(pid: int, returncode: int, last_message: str = "") -> str:
    """A sentence about how a broker process ended, with its last stderr line after an error."""
    if returncode < 0:
        try:
            how = f"was stopped by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"was stopped by signal {-returncode}"
        return f"The service (PID {pid}) {how}."
    sentence = f"The service (PID {pid}) exited with code {returncode}."
    if returncode > 0 and last_message:
        sentence += f" It said: {last_message}"
    return sentence
