"""Fixtures the component tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from backend.core.store import Store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """The broker's database, opened (migrated) in the test's folder and closed after it."""
    opened = Store(tmp_path / "pair.db")
    await opened.open()
    yield opened
    await opened.close()
