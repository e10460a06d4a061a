"""``Dispatcher.settle_after``: a call of a listed method is answered only once its settle step
has run (the proxy worker routes by the change), and only for a call handled here that
succeeded."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import msgspec
import pytest

from backend.core.rpc import NOT_FORWARDED, Dispatcher
from backend.protocol import errors
from backend.protocol.contract import Method
from backend.protocol.peer import RpcPeer
from tests.fakes import settle


class Name(msgspec.Struct, frozen=True):
    name: str


CHANGE = Method("things:change", Name, Name, "a change that takes effect elsewhere")
READ = Method("things:read", Name, Name, "a read")
PEER = cast(RpcPeer, object())  # the handlers here do not use their caller


class Settle:
    """A settle step that holds its caller until ``release``."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate = asyncio.Event()

    async def __call__(self) -> None:
        self.calls += 1
        await self.gate.wait()


def _dispatcher(step: Settle) -> Dispatcher:
    dispatcher = Dispatcher()

    async def echo(params: Name, _: RpcPeer) -> Name:
        if params.name == "bad":
            raise errors.InvalidParams("not a name")
        return params

    dispatcher.add(CHANGE, echo)
    dispatcher.add(READ, echo)
    dispatcher.settle_after([CHANGE], step)
    return dispatcher


async def test_a_listed_call_is_answered_after_its_settle_step() -> None:
    step = Settle()
    call = asyncio.create_task(_dispatcher(step)(CHANGE.name, {"name": "x"}, PEER))
    await settle()
    assert step.calls == 1
    assert not call.done()  # the change is made, but not answered until it took effect
    step.gate.set()
    assert await asyncio.wait_for(call, 1.0) == Name("x")


async def test_other_calls_and_failed_ones_do_not_wait() -> None:
    step = Settle()
    dispatcher = _dispatcher(step)
    assert await asyncio.wait_for(dispatcher(READ.name, {"name": "y"}, PEER), 1.0) == Name("y")
    with pytest.raises(errors.InvalidParams):
        await asyncio.wait_for(dispatcher(CHANGE.name, {"name": "bad"}, PEER), 1.0)
    assert step.calls == 0


async def test_a_call_answered_by_another_node_does_not_wait_here() -> None:
    step = Settle()
    dispatcher = _dispatcher(step)

    async def forwarder(method: Method[Any, Any], params: Any) -> Any:
        return Name("there") if params.name == "remote" else NOT_FORWARDED

    dispatcher.forward([CHANGE], forwarder)
    answer = dispatcher(CHANGE.name, {"name": "remote"}, PEER)
    assert await asyncio.wait_for(answer, 1.0) == Name("there")
    assert step.calls == 0
    local = asyncio.create_task(dispatcher(CHANGE.name, {"name": "here"}, PEER))
    await settle()
    assert step.calls == 1 and not local.done()
    step.gate.set()
    assert await asyncio.wait_for(local, 1.0) == Name("here")
