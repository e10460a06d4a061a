"""The custody channel between the broker and its proxy worker (docs/ARCHITECTURE.md,
"Requests that wait survive a worker crash").

A front-door request that waits in the worker's engine scheduler is *held*: the worker sends
the broker a duplicate of the client's connection and a memory file with the request as it
came (``Held`` with two descriptors). Once the request leaves the queue (admitted, or the client
went away) the worker sends ``Released`` before anything reaches an engine. If the worker dies
first, the broker still has the connection open and gives every held request to the next
worker (``Held`` again, with the same descriptors), which serves it as if the client had just
sent it, under the same job.
"""

from __future__ import annotations

import msgspec

from backend.protocol.proxy import Door

# The descriptors of a held request, in this order.
CONNECTION, REQUEST = 0, 1


class Held(msgspec.Struct, frozen=True, kw_only=True, tag="held"):
    """A request waiting in the worker's queue: ``number`` is unique per worker run; the job
    goes on from ``seq`` (its last event) and ``attempt``."""

    number: int
    door: Door
    job: str
    seq: int
    attempt: int
    created_at: float


class Released(msgspec.Struct, frozen=True, kw_only=True, tag="released"):
    """The held request ``number`` left the queue: the broker closes its copies."""

    number: int


Message = Held | Released

_decoder = msgspec.json.Decoder(Message)


class BadMessage(ValueError):
    """Bytes on the custody channel that are not one of its messages."""


def encode(message: Message) -> bytes:
    """One message's bytes."""
    return msgspec.json.encode(message)


def decode(data: bytes) -> Message:
    """One message; raises ``BadMessage`` on anything else."""
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise BadMessage(str(exc)) from None
