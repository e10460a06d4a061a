"""``NumberedSubscription`` against a scripted connection: snapshot, early events, gaps, reset."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.stores.subscription import NumberedSubscription
from backend.common.tasks import TaskSet
from backend.protocol import methods
from backend.protocol.errors import RpcError, Unavailable
from tests.gui.helpers import FakeConnection, settle, wait_until

Seen = list[tuple[str, int]]  # ("snapshot" | "event", seq) in the order the callbacks ran


def snapshot(seq: int) -> dict[str, Any]:
    return {"seq": seq, "components": []}


def event(seq: int) -> dict[str, Any]:
    component = {"name": "proxy", "kind": "task", "status": "running", "restarts": 0, "since": 1.0}
    return {"seq": seq, "event": "component_changed", "component": component}


def pending() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


class Stream:
    """A subscription to ``components:*`` that records what it hands on."""

    def __init__(self, connection: FakeConnection, tasks: TaskSet) -> None:
        self.seen: Seen = []
        self.failures: list[RpcError] = []
        self.subscription = NumberedSubscription(
            tasks,
            connection,
            methods.COMPONENTS_SUBSCRIBE,
            methods.COMPONENTS_EVENT,
            on_snapshot=lambda s: self.seen.append(("snapshot", s.seq)),
            on_event=lambda e: self.seen.append(("event", e.seq)),
            on_failure=self.failures.append,
        )

    def feed(self, *seqs: int) -> None:
        for seq in seqs:
            self.subscription.feed(event(seq))


@pytest.fixture
async def stream(connection: FakeConnection) -> AsyncIterator[Stream]:
    tasks = TaskSet("test")
    yield Stream(connection, tasks)
    await tasks.close()


def subscribes(connection: FakeConnection) -> int:
    return [method for method, _ in connection.calls].count(methods.COMPONENTS_SUBSCRIBE.name)


async def test_snapshot_then_events_in_order(connection: FakeConnection, stream: Stream) -> None:
    connection.script(methods.COMPONENTS_SUBSCRIBE, snapshot(5))
    stream.subscription.start()
    await wait_until(lambda: stream.subscription.seq == 5)
    stream.feed(6, 7)
    assert stream.seen == [("snapshot", 5), ("event", 6), ("event", 7)]
    assert stream.subscription.seq == 7


async def test_early_events_apply_after_the_snapshot_in_seq_order(
    connection: FakeConnection, stream: Stream
) -> None:
    answer = pending()
    connection.script(methods.COMPONENTS_SUBSCRIBE, answer)
    stream.subscription.start()
    await settle()
    stream.feed(7, 5, 4, 6)
    assert stream.seen == []
    assert stream.subscription.seq is None
    answer.set_result(snapshot(4))
    await wait_until(lambda: stream.subscription.seq == 7)
    assert stream.seen == [("snapshot", 4), ("event", 5), ("event", 6), ("event", 7)]


async def test_duplicate_and_old_events_are_ignored(
    connection: FakeConnection, stream: Stream
) -> None:
    connection.script(methods.COMPONENTS_SUBSCRIBE, snapshot(5))
    stream.subscription.start()
    await wait_until(lambda: stream.subscription.seq == 5)
    stream.feed(5, 3, 6, 6, 4)
    stream.subscription.feed({"seq": 7, "event": "something else"})  # does not decode
    assert stream.seen == [("snapshot", 5), ("event", 6)]
    assert stream.subscription.seq == 6
    assert subscribes(connection) == 1


async def test_a_gap_subscribes_again_and_catches_up(
    connection: FakeConnection, stream: Stream
) -> None:
    second = pending()
    connection.script(methods.COMPONENTS_SUBSCRIBE, snapshot(1), second)
    stream.subscription.start()
    await wait_until(lambda: stream.subscription.seq == 1)
    stream.feed(2, 4)  # 3 went missing
    assert stream.subscription.seq is None
    await settle()
    assert subscribes(connection) == 2
    stream.feed(6)  # overtakes the second snapshot
    second.set_result(snapshot(5))
    await wait_until(lambda: stream.subscription.seq == 6)
    assert stream.seen == [("snapshot", 1), ("event", 2), ("snapshot", 5), ("event", 6)]


async def test_a_gap_among_early_events_leaves_the_rest_for_the_next_snapshot(
    connection: FakeConnection, stream: Stream
) -> None:
    first = pending()
    connection.script(methods.COMPONENTS_SUBSCRIBE, first, snapshot(8))
    stream.subscription.start()
    await settle()
    stream.feed(2, 4, 8, 9)
    first.set_result(snapshot(1))
    await wait_until(lambda: stream.subscription.seq == 9)
    assert stream.seen == [("snapshot", 1), ("event", 2), ("snapshot", 8), ("event", 9)]
    assert subscribes(connection) == 2


async def test_the_answer_to_a_cancelled_subscribe_is_ignored(
    connection: FakeConnection, stream: Stream
) -> None:
    stale = pending()
    # Shielded: the answer arrives after all, as a broker's would once the call was sent.
    connection.script(methods.COMPONENTS_SUBSCRIBE, asyncio.shield(stale), snapshot(9))
    stream.subscription.start()
    await settle()
    stream.subscription.start()
    await wait_until(lambda: stream.subscription.seq == 9)
    stale.set_result(snapshot(1))
    await settle()
    stream.feed(10)
    assert stream.seen == [("snapshot", 9), ("event", 10)]


async def test_a_failed_subscribe_applies_nothing(
    connection: FakeConnection, stream: Stream
) -> None:
    connection.script(methods.COMPONENTS_SUBSCRIBE, Unavailable("not yet"))
    stream.subscription.start()
    await settle()
    stream.feed(1, 2)
    assert stream.seen == []
    assert stream.subscription.seq is None
    assert [failure.message for failure in stream.failures] == ["not yet"]


async def test_a_snapshot_of_the_wrong_shape_is_a_failure(
    connection: FakeConnection, stream: Stream
) -> None:
    connection.script(methods.COMPONENTS_SUBSCRIBE, {"seq": "five", "components": []})
    stream.subscription.start()
    await settle()
    assert stream.seen == []
    assert len(stream.failures) == 1
    assert "components:subscribe" in stream.failures[0].message


async def test_reset_cancels_the_subscribe_and_forgets_the_stream(
    connection: FakeConnection, stream: Stream
) -> None:
    connection.script(methods.COMPONENTS_SUBSCRIBE, snapshot(3))
    stream.subscription.start()
    await wait_until(lambda: stream.subscription.seq == 3)
    stream.subscription.reset()
    assert stream.subscription.seq is None
    stream.feed(4)  # from the session that ended: waits, then is dropped by the next start

    stale = pending()
    connection.script(methods.COMPONENTS_SUBSCRIBE, asyncio.shield(stale), snapshot(1))
    stream.subscription.start()
    await settle()
    stream.subscription.reset()
    stale.set_result(snapshot(20))
    await settle()
    assert stream.subscription.seq is None

    stream.subscription.start()  # the next session starts its numbers again
    await wait_until(lambda: stream.subscription.seq == 1)
    stream.feed(2)
    assert stream.seen == [("snapshot", 3), ("snapshot", 1), ("event", 2)]
