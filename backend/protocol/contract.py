"""Typed descriptors of the JSON-RPC contract: a method is a name with a params and a result type,
a push is a name with a payload type. Both sides use the same descriptor: the broker's dispatcher
converts params with it, the clients decode results and pushes with it, so a call is typed from
end to end and a name is written once, in ``methods.py``.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

import msgspec

from backend.protocol import errors

P = TypeVar("P")
R = TypeVar("R")
E = TypeVar("E")


class NoParams(msgspec.Struct, frozen=True, kw_only=True):
    """The params of a method that takes none (``null``, absent or ``{}`` on the wire)."""


NO_PARAMS = NoParams()


class Method(msgspec.Struct, Generic[P, R], frozen=True):
    """One request method: ``name`` on the wire, its params and its single result type."""

    name: str
    params: type[P]
    result: type[R]  # a Struct, ``list[X]`` or ``type(None)``
    summary: str
    # The name it had before a rename: still answered, so older clients and members keep working.
    former: str | None = None

    def convert_params(self, raw: Any) -> P:
        """Wire params to ``P``; malformed params raise ``InvalidParams`` naming the field."""
        if isinstance(raw, list):
            raise errors.InvalidParams(f"Invalid params for {self.name}: params must be an object")
        try:
            converted: P = msgspec.convert(raw if raw is not None else {}, self.params)
        except msgspec.ValidationError as exc:
            raise errors.InvalidParams(f"Invalid params for {self.name}: {exc}") from None
        return converted

    def decode_result(self, raw: Any) -> R:
        """A wire result to ``R``; a result of another shape raises ``BadResult``."""
        try:
            decoded: R = msgspec.convert(raw, self.result)
        except msgspec.ValidationError as exc:
            raise errors.BadResult(f"{self.name}: unexpected result: {exc}") from None
        return decoded

    def encode_params(self, params: P | None) -> Any:
        """``P`` to what goes on the wire (``None`` for no params)."""
        if params is None or isinstance(params, NoParams):
            return None
        return msgspec.to_builtins(params)


class Push(msgspec.Struct, Generic[E], frozen=True):
    """One notification (broker to client, or worker to broker): ``name`` and its payload type."""

    name: str
    payload: Any  # the msgspec type of E, often a tagged union (which is not a ``type[E]``)
    summary: str
    # The name it had before a rename: what a client that subscribed by a former name receives.
    former: str | None = None

    def decode(self, raw: Any) -> E:
        """A wire payload to ``E``; another shape raises ``BadResult``."""
        try:
            decoded: E = msgspec.convert(raw, self.payload)
        except msgspec.ValidationError as exc:
            raise errors.BadResult(f"{self.name}: unexpected payload: {exc}") from None
        return decoded


class RawCaller(Protocol):
    """What sends one raw request (an ``RpcPeer``)."""

    async def call(self, method: str, params: Any = None, *, timeout: float | None = 10.0) -> Any:
        """Send ``method`` with raw ``params``; return the raw result."""


async def call(
    peer: RawCaller, method: Method[P, R], params: P | None = None, *, timeout: float | None = 10.0
) -> R:
    """Call ``method`` on ``peer`` and return its typed result."""
    raw = await peer.call(method.name, method.encode_params(params), timeout=timeout)
    return method.decode_result(raw)
