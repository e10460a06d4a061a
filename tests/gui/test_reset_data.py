"""Reset app data against a real data folder: with a real broker the app started (stopped,
deleted, started fresh with a new identity), the model store kept unless chosen, links never
followed out of the folder, and a broker the app did not start refused."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.broker.connection import BrokerConnection
from app.broker.launch import BrokerLaunch
from app.broker.state import Ownership, ServiceState
from app.controllers.reset_data import NOT_OURS, ResetDataController, ResetPreview, preview_of
from app.controllers.reset_data_files import (
    DELETED,
    ResetOutcome,
    delete_app_data,
    models_size,
)
from backend.protocol import methods
from tests.gui.helpers import FakeConnection, wait_until

READY_TIMEOUT = 60.0
MODEL = b"GGUF" + bytes(4096)


def put_model(data_dir: Path) -> Path:
    store = data_dir / "models" / "llamacpp"
    store.mkdir(parents=True, exist_ok=True)
    model = store / "tiny.gguf"
    model.write_bytes(MODEL)
    return model


def put_app_data(data_dir: Path) -> None:
    """What a node that ran leaves in its folder, written by hand (no broker)."""
    (data_dir / "settings.json").write_text("{}")
    for name in ("pair.db", "pair.db-wal", "pair.db.corrupt-17", "broker.json"):
        (data_dir / name).write_bytes(b"x")
    (data_dir / "identity").mkdir()
    (data_dir / "identity" / "node.crt").write_text("cert")
    (data_dir / "jobs-journal").mkdir()
    (data_dir / "logs").mkdir()
    for name in ("broker.log", "broker.log.1", "app.log"):
        (data_dir / "logs" / name).write_text("line\n")


@pytest.fixture
async def owned_connection(
    data_dir: Path, broker_args: tuple[str, ...]
) -> AsyncIterator[BrokerConnection]:
    connection = BrokerConnection(BrokerLaunch(data_dir, broker_args))
    connection.start()
    yield connection
    await connection.stop()


async def identity(connection: BrokerConnection) -> tuple[str, str]:
    status = await connection.call(methods.CLUSTER_STATUS)
    return str(status.node_id), status.fingerprint


async def test_a_reset_stops_the_apps_broker_deletes_and_starts_a_fresh_one(
    data_dir: Path, owned_connection: BrokerConnection
) -> None:
    connection = owned_connection
    await wait_until(lambda: connection.state is ServiceState.READY, READY_TIMEOUT, "ready")
    assert connection.ownership is Ownership.OWNED
    before = await identity(connection)
    model = put_model(data_dir)
    (data_dir / "notes.txt").write_text("the user's own file")
    assert (data_dir / "pair.db").exists() and (data_dir / "identity").is_dir()
    controller = ResetDataController(connection, data_dir)
    outcomes: list[ResetOutcome] = []
    controller.reset_finished.connect(outcomes.append)
    try:
        controller.reset(models=False)
        await wait_until(lambda: bool(outcomes), 30, "the reset")
        outcome = outcomes[0]
        assert not outcome.failed
        assert data_dir / "pair.db" in outcome.removed
        assert data_dir / "identity" in outcome.removed
        await wait_until(lambda: connection.state is ServiceState.READY, READY_TIMEOUT, "fresh")
        after = await identity(connection)
        assert after[0] != before[0] and after[1] != before[1], "a new node id and certificate"
        assert model.read_bytes() == MODEL, "the model store is kept unless chosen"
        assert (data_dir / "notes.txt").exists(), "files PAIR did not write are left alone"
    finally:
        await controller.close()


async def test_a_broker_the_app_did_not_start_is_refused(data_dir: Path) -> None:
    connection = FakeConnection()
    connection.become_ready(Ownership.ATTACHED)
    put_app_data(data_dir)
    controller = ResetDataController(connection, data_dir)
    refusals: list[str] = []
    controller.reset_refused.connect(refusals.append)
    controller.reset(models=True)
    assert refusals == [NOT_OURS] and "Stop it there first" in NOT_OURS
    assert (data_dir / "pair.db").exists() and (data_dir / "identity").is_dir()
    await controller.close()
    await connection.stop()


def test_the_model_store_survives_unless_chosen(data_dir: Path) -> None:
    put_app_data(data_dir)
    model = put_model(data_dir)
    outcome = delete_app_data(data_dir, data_dir / "logs", models=False)
    assert not outcome.failed and model.read_bytes() == MODEL
    left = sorted(path.name for path in data_dir.iterdir())
    assert left == ["logs", "models"], "every kind of app data went; the models stayed"
    assert sorted(path.name for path in (data_dir / "logs").iterdir()) == ["app.log"]
    assert (data_dir / "logs" / "app.log").read_text() == "", "the open app log is emptied"
    delete_app_data(data_dir, data_dir / "logs", models=True)
    assert not (data_dir / "models").exists()


def test_links_are_removed_never_followed(data_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.gguf").write_bytes(MODEL)
    (data_dir / "identity").symlink_to(outside, target_is_directory=True)
    (data_dir / "models").mkdir()
    (data_dir / "models" / "llamacpp").symlink_to(outside, target_is_directory=True)
    assert models_size(data_dir) == 0, "a link's target is not counted"
    outcome = delete_app_data(data_dir, data_dir / "logs", models=True)
    assert not outcome.failed
    assert not os.path.lexists(data_dir / "identity") and not (data_dir / "models").exists()
    assert (outside / "precious.gguf").read_bytes() == MODEL


def test_the_preview_names_what_is_there_and_sizes_the_models(data_dir: Path) -> None:
    assert preview_of(data_dir) == ResetPreview((), 0, False)
    put_app_data(data_dir)
    put_model(data_dir)
    preview = preview_of(data_dir)
    assert {kind.name for kind in preview.present} == {
        "settings.json", "pair.db", "identity", "jobs-journal", "broker.json",
    }  # fmt: skip
    assert preview.has_models and preview.models_bytes == len(MODEL)
    assert {kind.name for kind in DELETED} >= {kind.name for kind in preview.present}
