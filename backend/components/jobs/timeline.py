"""A job's timeline on the wire (``JobStep``s, ``jobs:get``) and in the store (JSON)."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from backend.components.jobs.state import Completed, Errored, Started, Submitted
from backend.components.jobs.state import JobEvent as Step
from backend.protocol.types.base import NodeId
from backend.protocol.types.jobs import JobStep

_decoder = msgspec.json.Decoder(list[JobStep])


def to_steps(timeline: Iterable[Step]) -> list[JobStep]:
    """The reducer's events as the wire's timeline."""
    return [_wire(step) for step in timeline]


def from_steps(steps: Iterable[JobStep]) -> tuple[Step, ...]:
    """The wire's timeline as the reducer's events."""
    return tuple(_step(step) for step in steps)


def encode_timeline(timeline: Iterable[Step]) -> str | None:
    """The stored form of a timeline (None when it is empty)."""
    steps = to_steps(timeline)
    return msgspec.json.encode(steps).decode() if steps else None


def decode_timeline(text: str | None) -> tuple[Step, ...]:
    """A stored timeline; empty when there is none or it cannot be read."""
    if not text:
        return ()
    try:
        return from_steps(_decoder.decode(text))
    except msgspec.DecodeError:
        return ()  # a damaged timeline costs the details, not the job


def _wire(step: Step) -> JobStep:
    if isinstance(step, Submitted):
        return JobStep(
            seq=step.seq, kind="submitted", at=step.at, attempt=step.attempt, node=step.target
        )
    if isinstance(step, Started):
        return JobStep(
            seq=step.seq, kind="started", at=step.at, attempt=step.attempt, node=step.node
        )
    if isinstance(step, Completed):
        return JobStep(seq=step.seq, kind="completed", at=step.at, attempt=step.attempt)
    return JobStep(
        seq=step.seq,
        kind="errored",
        at=step.at,
        attempt=step.attempt,
        error=step.error,
        cancelled=step.cancelled,
    )


def _step(step: JobStep) -> Step:
    match step.kind:
        case "submitted":
            return Submitted(step.seq, step.attempt, step.node, step.at)
        case "started":
            return Started(step.seq, step.attempt, step.node or NodeId(""), step.at)
        case "completed":
            return Completed(step.seq, step.attempt, step.at)
        case "errored":
            return Errored(step.seq, step.attempt, step.at, step.error or "", step.cancelled)
