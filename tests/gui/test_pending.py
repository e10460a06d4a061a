"""The shared pending-actions store: begin, settle, expiry, replacement, progress, clear."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytestqt.qtbot import QtBot

from app.pending import PendingActions, PendingKey

KEY = PendingKey("node-1", "ollama")
MODEL_KEY = PendingKey("node-1", "ollama", "llama3")
OTHER = PendingKey("node-1", "lmstudio")


@pytest.fixture
def store() -> Iterator[PendingActions]:
    pending = PendingActions()
    yield pending
    pending.clear_all()


def test_begin_shows_the_action_at_once(qtbot: QtBot, store: PendingActions) -> None:
    with qtbot.waitSignal(store.changed) as changed:
        store.begin(KEY, "Starting")
    assert changed.args == [KEY]
    assert store.action(KEY) == "Starting"
    entry = store.get(KEY)
    assert entry is not None
    assert (entry.key, entry.timeout_s) == (KEY, 60.0)
    assert len(store) == 1
    assert store.action(OTHER) is None


def test_settle_drops_only_that_key(qtbot: QtBot, store: PendingActions) -> None:
    store.begin(KEY, "Starting")
    store.begin(OTHER, "Stopping")
    with qtbot.waitSignal(store.changed) as changed:
        assert store.settle(KEY)
    assert changed.args == [KEY]
    assert store.action(KEY) is None
    assert store.action(OTHER) == "Stopping"
    with qtbot.assertNotEmitted(store.changed):
        assert not store.settle(KEY)


def test_settle_engine_drops_its_model_actions_too(store: PendingActions) -> None:
    store.begin(KEY, "Restarting")
    store.begin(MODEL_KEY, "Loading")
    store.begin(OTHER, "Starting")
    store.settle_engine("node-1", "ollama")
    assert store.get(KEY) is None
    assert store.get(MODEL_KEY) is None
    assert store.action(OTHER) == "Starting"


async def test_an_unconfirmed_action_expires(qtbot: QtBot, store: PendingActions) -> None:
    with qtbot.waitSignal(store.expired, timeout=2000) as expired:
        store.begin(KEY, "Starting", timeout_s=0.05)
    assert expired.args == [KEY]
    assert store.get(KEY) is None


async def test_a_settled_action_never_expires(qtbot: QtBot, store: PendingActions) -> None:
    store.begin(KEY, "Starting", timeout_s=0.05)
    store.settle(KEY)
    with qtbot.assertNotEmitted(store.expired, wait=150):
        pass


async def test_a_newer_action_replaces_the_older_and_its_timer(
    qtbot: QtBot, store: PendingActions
) -> None:
    store.begin(KEY, "Stopping", timeout_s=0.05)
    store.begin(KEY, "Starting", timeout_s=5.0)
    with qtbot.assertNotEmitted(store.expired, wait=150):
        pass
    assert store.action(KEY) == "Starting"
    assert len(store) == 1


async def test_progress_extends_the_timeout(qtbot: QtBot, store: PendingActions) -> None:
    store.begin(KEY, "Installing", timeout_s=0.2)
    with qtbot.assertNotEmitted(store.expired, wait=120):
        pass
    assert store.extend(KEY)  # at 0.12 s: the first timer (0.2 s) no longer counts
    with qtbot.assertNotEmitted(store.expired, wait=120):
        pass
    assert store.action(KEY) == "Installing"
    with qtbot.waitSignal(store.expired, timeout=2000):
        pass
    assert not store.extend(KEY)


def test_clear_all_drops_everything(qtbot: QtBot, store: PendingActions) -> None:
    store.begin(KEY, "Starting")
    store.begin(MODEL_KEY, "Pulling")
    emitted: list[object] = []
    store.changed.connect(emitted.append)
    store.clear_all()
    assert len(store) == 0
    assert set(emitted) == {KEY, MODEL_KEY}
