"""Every method the contract declares is routed by a real broker (and nothing else answers)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from backend.protocol import errors, methods
from tests.integration.conftest import Broker


async def test_every_declared_method_is_registered(start_broker: Callable[..., Broker]) -> None:
    broker = start_broker()
    async with broker.connect(engine_events=False) as client:
        for method in methods.all_methods():
            # A list is never valid params: a routed method answers -32602 before its handler
            # runs (so nothing happens), an unrouted one -32601.
            with pytest.raises(errors.InvalidParams):
                await client.call(method.name, [1])
        with pytest.raises(errors.MethodNotFound):
            await client.call("engine:explode", [1])
