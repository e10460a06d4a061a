"""The stores against a scripted connection: one subscription per stream, its state and signals,
ordering (snapshot, early events, gaps), session loss, and sharing between controllers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.controllers.activity import ActivityController
from app.controllers.engines import EnginesController
from app.controllers.jobs import JobsController
from app.controllers.models import ModelsController
from app.controllers.nodes import NodesController
from app.models.engines import EnginesModel
from app.models.errors import ErrorsModel
from app.models.jobs import JobsModel
from app.models.nodes import NodesModel
from app.pending import PendingActions
from app.stores.settings import SettingsStore
from backend.protocol import methods
from backend.protocol.errors import Unavailable
from backend.protocol.types.base import EngineName, JobKey, NodeId
from tests.gui.helpers import NO_MODELS, EngineEvents, FakeConnection, Stores, settle, wait_until


def node(node_id: str, name: str, *sources: str, **extra: Any) -> dict[str, Any]:
    return {
        "node_id": node_id, "name": name, "kind": "pair", "sources": list(sources or ["mdns"]),
        "addresses": [], "ports": {}, "engines": {}, "reachable": True, **extra,
    }  # fmt: skip


def engine(name: str, state: str = "stopped", revision: int = 1) -> dict[str, Any]:
    return {
        "engine": name, "display_name": name.title(), "front_door": name, "mode": "process",
        "installed": True, "state": state, "port": 1, "default_port": 1, "revision": revision,
    }  # fmt: skip


def job(n: int, state: str = "running") -> dict[str, Any]:
    return {
        "key": f"o/r/{n}", "engine": "ollama", "model": "m", "origin": "o", "run_id": "r",
        "state": state, "created_at": float(n), "seq": 1,
    }  # fmt: skip


def upsert(seq: int, n: int, state: str = "running") -> dict[str, Any]:
    return {"seq": seq, "event": "upsert", "key": f"o/r/{n}", "workload": job(n, state)}


def pending() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


@pytest.fixture
async def stores(connection: FakeConnection) -> AsyncIterator[Stores]:
    built = Stores.build(connection)
    yield built
    await built.close()


class Recorder:
    """Every signal of a store, in the order it was emitted."""

    def __init__(self, **signals: Any) -> None:
        self.seen: list[tuple[str, ...]] = []
        for name, signal in signals.items():
            signal.connect(lambda *args, name=name: self.seen.append((name, *map(str, args))))


async def test_discovery_applies_the_snapshot_then_each_event_in_order(
    connection: FakeConnection, stores: Stores
) -> None:
    store = stores.discovery
    seen = Recorder(
        reset=store.reset,
        changed=store.node_changed,
        telemetry=store.telemetry_changed,
        removed=store.node_removed,
    )
    snapshot = {"seq": 5, "nodes": [node("me", "desk", "self"), node("b", "beta")]}
    connection.script(methods.DISCOVERY_SUBSCRIBE, snapshot)
    connection.become_ready()
    await wait_until(lambda: store.loaded)
    assert list(store.nodes) == ["me", "b"] and store.self_id == "me"
    telemetry = {"valid": True, "cpu_percent": 42.0}
    for event in (
        {"seq": 6, "event": "node_joined", "node_id": "c", "node": node("c", "gamma")},
        {"seq": 7, "event": "node_telemetry", "node_id": "b", "telemetry": telemetry,
         "last_seen": 9.0},
        {"seq": 7, "event": "node_left", "node_id": "b"},  # already applied: skipped
        {"seq": 8, "event": "node_updated", "node_id": "c", "node": node("c", "gamma2")},
        {"seq": 9, "event": "node_left", "node_id": "b"},
    ):  # fmt: skip
        connection.push(methods.DISCOVERY_EVENT, event)
    assert seen.seen == [
        ("reset",), ("changed", "c"), ("telemetry", "b"), ("changed", "c"), ("removed", "b"),
    ]  # fmt: skip
    gamma = store.node(NodeId("c"))
    assert gamma is not None and gamma.name == "gamma2"
    assert store.node(NodeId("b")) is None
    assert connection.called(methods.DISCOVERY_SUBSCRIBE) == [None]


async def test_engine_events_that_overtake_the_snapshot_wait_for_it(
    connection: FakeConnection, stores: Stores
) -> None:
    store = stores.engines
    answer = pending()
    connection.script(methods.ENGINE_SUBSCRIBE, answer)
    connection.become_ready()
    await settle()
    events = EngineEvents(connection, seq=3)
    events.state(engine("ollama", "starting", 2))  # seq 4: in the snapshot already
    events.state(engine("ollama", "running", 3))  # seq 5
    events.pull({"engine": "ollama", "model": "m:1b", "stage": "pulling", "percent": 5.0})
    assert store.statuses == {} and not store.loaded
    answer.set_result({**events.snapshot([engine("ollama", "starting", 2)]), "seq": 4})
    await wait_until(lambda: store.loaded)
    status = store.status(EngineName("ollama"))
    assert status is not None and (status.state, status.revision) == ("running", 3)
    assert list(store.pulls) == [("ollama", "m:1b")]
    events.pull({"engine": "ollama", "model": "m:1b", "stage": "success", "done": True})
    events.install({"engine": "llamacpp", "stage": "downloading", "percent": 1.0})
    assert store.pulls == {} and list(store.installs) == ["llamacpp"]
    models = {**NO_MODELS, "models": ["m:1b"], "by_engine": {"ollama": ["m:1b"]}}
    with_models = Recorder(models=store.models_changed)
    events.models(models)
    assert with_models.seen == [("models",)]
    assert store.models is not None and store.models.by_engine == {"ollama": ["m:1b"]}


async def test_the_engines_snapshot_brings_the_pulls_and_installs_in_progress(
    connection: FakeConnection, stores: Stores
) -> None:
    pull = {"engine": "ollama", "model": "big:70b", "stage": "pulling", "percent": 40.0}
    install = {"engine": "llamacpp", "stage": "unpacking"}
    EngineEvents(connection).script(engine("ollama"), pulls=[pull], installs=[install])
    connection.become_ready()
    await wait_until(lambda: stores.engines.loaded)
    progress = stores.engines.pulls[(EngineName("ollama"), "big:70b")]
    assert progress.percent == 40.0
    assert stores.engines.installs[EngineName("llamacpp")].stage == "unpacking"


async def test_other_members_engines_follow_their_events_beside_this_nodes(
    connection: FakeConnection, stores: Stores
) -> None:
    events = EngineEvents(connection)
    bob = {"node_id": "bob-id", "name": "bob", "reachable": True, "engines": [engine("ollama")]}
    connection.script(methods.ENGINE_SUBSCRIBE, {**events.snapshot([engine("llamacpp")]),
                                                 "members": [bob]})  # fmt: skip
    connection.become_ready()
    store = stores.engines
    await wait_until(lambda: store.loaded)
    changed: list[str] = []
    store.member_changed.connect(changed.append)
    assert store.members[NodeId("bob-id")].engines[0].engine == "ollama"
    assert list(store.statuses) == ["llamacpp"], "another member's engines are not this node's"

    events.member({**bob, "reachable": False, "error": "the link was lost"})
    carol = {"node_id": "carol-id", "name": "carol", "reachable": True}
    events.member(carol)
    await wait_until(lambda: NodeId("carol-id") in store.members)
    assert not store.members[NodeId("bob-id")].reachable
    events.member_left("bob-id")
    await wait_until(lambda: NodeId("bob-id") not in store.members)
    assert changed == ["bob-id", "carol-id", "bob-id"]
    assert list(store.statuses) == ["llamacpp"]


async def test_a_gap_subscribes_again_and_keeps_the_state_until_the_new_snapshot(
    connection: FakeConnection, stores: Stores
) -> None:
    store = stores.jobs
    second = pending()
    connection.script(methods.JOBS_SUBSCRIBE, {"seq": 10, "workloads": [job(1)]}, second)
    connection.become_ready()
    await wait_until(lambda: store.loaded)
    connection.push(methods.JOBS_EVENT, upsert(11, 2))
    connection.push(methods.JOBS_EVENT, upsert(14, 3))  # 12 and 13 went missing
    await settle()
    assert len(connection.called(methods.JOBS_SUBSCRIBE)) == 2
    assert list(store.jobs) == ["o/r/1", "o/r/2"]  # shown until the fresh snapshot
    connection.push(methods.JOBS_EVENT, upsert(21, 4))  # overtakes it
    resets = Recorder(reset=store.reset)
    second.set_result({"seq": 20, "workloads": [job(3), job(2, "completed")]})
    await wait_until(lambda: resets.seen == [("reset",)])
    assert list(store.jobs) == ["o/r/3", "o/r/2", "o/r/4"]
    done = store.job(JobKey("o/r/2"))
    assert done is not None and done.state == "completed"
    assert connection.called(methods.JOBS_SUBSCRIBE)[0] == {"limit": 1000}


async def test_a_lost_session_clears_every_store(
    qtbot: QtBot, connection: FakeConnection, stores: Stores
) -> None:
    connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 1, "nodes": [node("a", "alpha")]})
    EngineEvents(connection).script(engine("ollama"), models=NO_MODELS)
    connection.script(methods.JOBS_SUBSCRIBE, {"seq": 1, "workloads": [job(1)]})
    component = {"name": "proxy", "kind": "task", "status": "running", "since": 1.0}
    connection.script(methods.COMPONENTS_SUBSCRIBE, {"seq": 1, "components": [component]})
    connection.become_ready()
    everything = (stores.discovery, stores.engines, stores.jobs, stores.components)
    await wait_until(lambda: all(store.loaded for store in everything))
    with qtbot.waitSignals([store.cleared for store in everything]):
        connection.lose_session()
    assert not any(store.loaded for store in everything)
    assert stores.discovery.nodes == {} and stores.jobs.jobs == {}
    assert stores.engines.statuses == {} and stores.engines.models is None
    assert stores.components.components == {}
    connection.push(methods.JOBS_EVENT, upsert(2, 5))  # from the session that ended
    await settle()
    assert stores.jobs.jobs == {}


async def test_a_failed_subscribe_says_why_and_can_be_retried(
    connection: FakeConnection, stores: Stores
) -> None:
    store = stores.engines
    seen = Recorder(failed=store.failed, reset=store.reset)
    connection.script(methods.ENGINE_SUBSCRIBE, Unavailable("the engines component is down"))
    connection.become_ready()
    await wait_until(lambda: bool(seen.seen))
    assert seen.seen == [("failed", "the engines component is down")]
    assert store.error == "the engines component is down" and not store.loaded
    EngineEvents(connection).script(engine("ollama"))
    store.resubscribe()
    await wait_until(lambda: store.loaded)
    assert seen.seen[-1] == ("reset",)
    assert store.error is None and list(store.statuses) == ["ollama"]


async def test_controllers_reading_one_store_cause_one_subscribe_per_stream(
    connection: FakeConnection, stores: Stores
) -> None:
    pending_actions = PendingActions()
    controllers = [
        NodesController(connection, NodesModel(), stores.discovery, stores.engines),
        JobsController(connection, JobsModel(), stores.jobs, stores.discovery),
        EnginesController(
            connection,
            EnginesModel(),
            pending_actions,
            stores.engines,
            stores.discovery,
            SettingsStore(connection),
        ),
        ModelsController(connection, pending_actions, stores.engines, stores.discovery),
        ActivityController(connection, ErrorsModel(), stores.jobs, stores.engines),
    ]
    peer = node("p", "peer", engines={"ollama": {"models": ["x:1b"]}})
    connection.script(methods.DISCOVERY_SUBSCRIBE, {"seq": 3, "nodes": [peer]})
    EngineEvents(connection).script(engine("ollama", "running"))
    connection.script(methods.JOBS_SUBSCRIBE, {"seq": 1, "workloads": [job(1)]})
    connection.become_ready()
    nodes, jobs, engines, models, activity = controllers
    await wait_until(lambda: engines.model.get((NodeId("p"), EngineName("ollama"))) is not None)
    await wait_until(lambda: activity.running_jobs == 1 and jobs.model.rowCount() == 1)
    assert isinstance(nodes, NodesController) and nodes.model.rowCount() == 1
    assert isinstance(models, ModelsController) and "p" in models.models.nodes()
    for method in (methods.DISCOVERY_SUBSCRIBE, methods.ENGINE_SUBSCRIBE):
        assert len(connection.called(method)) == 1, method.name
    assert len(connection.called(methods.JOBS_SUBSCRIBE)) == 1
    for controller in controllers:
        await controller.close()
