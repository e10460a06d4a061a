"""The proxy worker's event loop: uvloop where it is installed, asyncio's when asked."""

from __future__ import annotations

import asyncio
import sys

import pytest

from backend.workers import event_loop


def loop_module_under_run() -> str:
    seen: list[str] = []

    async def main() -> None:
        seen.append(type(asyncio.get_running_loop()).__module__)

    event_loop.run(main())
    return seen[0]


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not a dependency on Windows")
def test_uvloop_is_the_default_where_it_is_a_dependency(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(event_loop.LOOP_ENV, raising=False)
    assert event_loop.loop_name() == "uvloop"
    assert loop_module_under_run().startswith("uvloop")


@pytest.mark.parametrize("value", ["asyncio", " AsyncIO "])
def test_the_environment_asks_for_asyncios_loop(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(event_loop.LOOP_ENV, value)
    assert event_loop.loop_name() == "asyncio"
    assert loop_module_under_run().startswith("asyncio")


def test_without_uvloop_installed_asyncio_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(event_loop.LOOP_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert event_loop.loop_name() == "asyncio"
    assert loop_module_under_run().startswith("asyncio")
