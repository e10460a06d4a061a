"""The proxy worker's loop, either kind, logs out-of-descriptor errors as counted lines."""

from __future__ import annotations

import asyncio

import pytest

from backend.core.loop_errors import AcceptErrorLog
from backend.workers import event_loop


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_the_loop_runs_with_the_accept_error_log(
    monkeypatch: pytest.MonkeyPatch, loop: str
) -> None:
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    monkeypatch.setenv(event_loop.LOOP_ENV, loop)
    handlers: list[object] = []

    async def main() -> None:
        handlers.append(asyncio.get_running_loop().get_exception_handler())

    event_loop.run(main())
    assert len(handlers) == 1 and isinstance(handlers[0], AcceptErrorLog)
