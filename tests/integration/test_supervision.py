"""Worker supervision in a real broker: kill -9, a hung worker, a crash loop."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest

from backend.core.clock import SUPERVISION_SPEED_ENV
from tests.integration.conftest import Broker

StartBroker = Callable[..., Broker]
CRASH_ID = "supervisor:crashed:testworker"
# The crash loop's supervisor runs on a clock five times faster: its schedule of 1 + 2 + 4 + 8 +
# 16 s is waited and reported on that clock exactly, in a fifth of the real time. Not faster: a
# run of 60 s on it (12 s real) counts as healthy and would reset the streak, and starting the
# test worker on a loaded machine takes seconds.
SUPERVISION_SPEED = "5"
# The hung worker's fifteen silent seconds, on a clock three times faster (the test worker's
# heartbeat is watched on it too): 5 s of real silence, which a healthy worker on a loaded
# machine never comes near, while a ping's own timeout stays a real second.
HEARTBEAT_SPEED = "3"


def _worker(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["components"] if c["name"] == "testworker")


async def test_killed_worker_is_restarted_after_one_second_and_the_error_clears(
    start_broker: StartBroker,
) -> None:
    broker = start_broker("--test-worker", "healthy")
    async with broker.connect() as client:
        await client.call("components:subscribe")
        old_pid = _worker(await client.call("status"))["pid"]
        os.kill(old_pid, signal.SIGKILL)
        raised = await client.wait_push(
            "errors:update", lambda entries: any(e["id"] == CRASH_ID for e in entries)
        )
        assert "exited with code -9" in raised[0]["message"]
        backoff = await client.wait_push(
            "components:event", lambda e: e["component"]["status"] == "backoff"
        )
        component = backoff["component"]
        assert component["next_restart_at"] - component["since"] == pytest.approx(1.0, abs=0.01)
        await client.wait_push("errors:update", lambda entries: entries == [], timeout=15)
        restarted = _worker(await client.call("status"))
        assert restarted["status"] == "running"
        assert restarted["restarts"] == 1
        assert restarted["pid"] not in (None, old_pid)


@pytest.mark.slow
async def test_a_hung_worker_is_killed_after_fifteen_silent_seconds_and_restarted(
    start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SUPERVISION_SPEED_ENV, HEARTBEAT_SPEED)
    broker = start_broker("--test-worker", "healthy")
    async with broker.connect() as client:
        old_pid = _worker(await client.call("status"))["pid"]
        os.kill(old_pid, signal.SIGSTOP)  # alive but silent: a real hang
        raised = await client.wait_push(
            "errors:update", lambda entries: any(e["id"] == CRASH_ID for e in entries), timeout=30
        )
        assert "no heartbeat answer for 1" in raised[0]["message"]
        await client.wait_push("errors:update", lambda entries: entries == [], timeout=15)
        restarted = _worker(await client.call("status"))
        assert restarted["pid"] not in (None, old_pid)
        assert restarted["status"] == "running"
    with pytest.raises(ProcessLookupError):
        os.kill(old_pid, 0)


@pytest.mark.slow
async def test_a_crash_loop_gives_up_after_five_restarts_on_the_backoff_schedule(
    start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SUPERVISION_SPEED_ENV, SUPERVISION_SPEED)
    broker = start_broker("--test-worker", "crash-on-start")
    async with broker.connect() as client:
        snapshot = await client.call("components:subscribe")
        if _worker({"components": snapshot["components"]})["status"] != "failed":
            await client.wait_push(
                "components:event",
                lambda e: (
                    e["component"]["name"] == "testworker" and e["component"]["status"] == "failed"
                ),
                timeout=60,
            )
        delays = [
            round(params["component"]["next_restart_at"] - params["component"]["since"], 2)
            for name, params in client.pushes
            if name == "components:event" and params["component"]["status"] == "backoff"
        ]
        status = await client.call("status")
        worker = _worker(status)
        assert (worker["status"], worker["restarts"]) == ("failed", 5)
        # Subscribing may have missed the first backoff events (a loaded machine connects late);
        # those seen follow the schedule, and the log holds the whole of it.
        assert delays == [1, 2, 4, 8, 16][5 - len(delays) :]
        error = next(e for e in status["errors"] if e["id"] == CRASH_ID)
        assert "stays down" in error["message"]
        assert error["action"] == {
            "kind": "restart-component",
            "label": "Start again",
            "target": "testworker",
        }
    logs = [r["msg"] for r in broker.logs() if "testworker crashed after" in r["msg"]]
    assert len(logs) == 6
    schedule = [
        r["msg"].split(" restarts in ")[1] for r in broker.logs() if " restarts in " in r["msg"]
    ]
    assert schedule == [f"{d} s (attempt {n} of 5)" for n, d in enumerate([1, 2, 4, 8, 16], 1)]
