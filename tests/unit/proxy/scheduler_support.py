"""The ``scheduled`` fixture of the engine scheduler's tests, shared as a pytest plugin
(``pytest_plugins = ["tests.unit.proxy.scheduler_support"]`` in the test modules that use it:
a fixture imported by name reads to ruff as an unused import, and keeps pytest from loading
this module as a plugin)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.unit.proxy.scheduler_fakes import Schedulers


@pytest.fixture
async def scheduled() -> AsyncIterator[Schedulers]:
    """Builds the requests of a scheduler for a shape; cleaned up after the test."""
    schedulers = Schedulers()
    yield schedulers
    await schedulers.cleanup()
