"""The run ledger against a real SQLite store: a start row, then its clean stop."""

from __future__ import annotations

from pathlib import Path

from backend.core.runs import BrokerRun, RunLedger
from backend.core.store import Store
from tests.fakes import FakeClock


async def test_a_run_is_recorded_at_start_and_its_clean_stop_at_the_end(tmp_path: Path) -> None:
    clock = FakeClock(start=500.0)
    store = Store(tmp_path / "pair.db")
    await store.open()
    try:
        ledger = RunLedger(store, clock)
        first = await ledger.record_start(pid=41, version="0.1.0", started_at=500.0)
        clock.now = 530.0
        await ledger.record_stop(first)
        second = await ledger.record_start(pid=42, version="0.1.1", started_at=600.0)
        assert await ledger.runs() == [
            BrokerRun(first, 41, "0.1.0", 500.0, 530.0),
            BrokerRun(second, 42, "0.1.1", 600.0, None),
        ]
    finally:
        await store.close()


async def test_the_ledger_survives_reopening_the_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "pair.db")
    await store.open()
    try:
        run = await RunLedger(store, FakeClock()).record_start(pid=7, version="v", started_at=1.0)
    finally:
        await store.close()
    reopened = Store(tmp_path / "pair.db")
    await reopened.open()
    try:
        assert [(r.id, r.stopped_at) for r in await RunLedger(reopened, FakeClock()).runs()] == [
            (run, None)
        ]
    finally:
        await reopened.close()
