"""``pair engines --verbose``: each engine's scheduler under its row (slots and load, queues per
model, the turn of a one-model engine, the exclusive operation, slot owners), asked of the
member ``--node`` names; nothing of it without ``--verbose``; a broker without schedulers."""

from __future__ import annotations

import io
import sys
from typing import Any

import pytest

from backend.cli import exit_codes
from backend.cli.main import main
from backend.cli.scheduler_format import scheduler_lines
from backend.protocol import errors, methods
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineStatus
from backend.protocol.types.scheduler import (
    ExclusiveOperation,
    ModelQueue,
    SchedulerState,
    SchedulerStates,
    SlotOwners,
)
from tests.unit.cli.scripted import BOB, StreamingBroker

LLAMACPP, OLLAMA = EngineName("llamacpp"), EngineName("ollama")

BUSY_LLAMACPP = SchedulerState(
    engine=LLAMACPP,
    single_model=True,
    ceiling=2,
    idle=0,
    running=2,
    waiting=3,
    queues=[
        ModelQueue(model="qwen", running=2, waiting=2),
        ModelQueue(model="tiny", waiting=1),
    ],
    resident="qwen",
    turn="qwen",
    exclusive=ExclusiveOperation(kind="delete", model="tiny"),
    exclusive_waiting=1,
    slot_owners=SlotOwners(sessions=2, fresh=1),
)


def _status(engine: str, state: str = "running", **fields: Any) -> EngineStatus:
    values: dict[str, Any] = {
        "engine": engine,
        "display_name": engine.title(),
        "front_door": engine,
        "mode": "process",
        "installed": True,
        "state": state,
        "port": 8081,
        "default_port": 8080,
        "pid": 4242,
        "slots": 2,
        "desired": True,
        "binary": f"/opt/{engine}",
    }
    return EngineStatus(**(values | fields))


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> StreamingBroker:
    broker = StreamingBroker()
    broker.attach(monkeypatch)
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    engines = [_status("ollama", port=11435), _status("llamacpp"), _status("lmstudio", "stopped")]
    broker.answer(methods.ENGINE_LIST.name, engines)
    broker.answer(methods.ENGINE_SCHEDULER.name, SchedulerStates(engines=[BUSY_LLAMACPP]))
    return broker


def test_a_busy_one_model_engine_shows_every_part_of_its_scheduler() -> None:
    assert scheduler_lines(BUSY_LLAMACPP) == [
        "  scheduler  2 running, 3 waiting · slots 2, 0 idle",
        "  queues     qwen 2 running, 2 waiting · tiny 1 waiting",
        "  turn       qwen (loaded)",
        "  exclusive  delete tiny, after the 2 running · 1 more waiting",
        "  owners     2 sessions, 0 keyless, 1 fresh",
    ]


def test_an_engine_of_many_models_leaves_out_what_it_does_not_have() -> None:
    state = SchedulerState(
        engine=OLLAMA,
        ceiling=4,
        running=1,
        queues=[ModelQueue(model="llama3", running=1), ModelQueue(model="phi3")],
        slot_owners=SlotOwners(sessions=1, keyless=2, fresh=1),
    )
    assert scheduler_lines(state) == [
        "  scheduler  1 running, 0 waiting · slots 4",  # Ollama reports no idle slots
        "  queues     llama3 1 running · phi3 idle",
        "  owners     1 session, 2 keyless, 1 fresh",
    ]


def test_the_turn_names_what_is_loaded_when_it_is_another_model_or_none() -> None:
    base = SchedulerState(engine=LLAMACPP, single_model=True)
    switching = SchedulerState(engine=LLAMACPP, single_model=True, turn="tiny", resident="qwen")
    assert scheduler_lines(switching)[1] == "  turn       tiny (qwen loaded)"
    assert scheduler_lines(base)[1] == "  turn       none (nothing loaded)"


def test_an_exclusive_operation_on_a_drained_engine_and_ones_only_waiting() -> None:
    restarting = SchedulerState(engine=LLAMACPP, exclusive=ExclusiveOperation(kind="restart"))
    queued = SchedulerState(engine=LLAMACPP, running=1, exclusive_waiting=2)
    assert scheduler_lines(restarting)[-1] == "  exclusive  restart"
    assert scheduler_lines(queued)[-1] == "  exclusive  2 waiting"


def test_verbose_prints_the_scheduler_under_each_running_engine(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["engines", "--verbose"]) == exit_codes.OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ENGINE")
    assert lines[1].startswith("ollama    running")
    assert lines[2] == "  scheduler  no requests yet"
    assert lines[3].startswith("llamacpp  running")
    assert lines[4:9] == scheduler_lines(BUSY_LLAMACPP)
    assert lines[9].startswith("lmstudio  stopped")
    assert len(lines) == 10, "a stopped engine without a scheduler gets no lines"
    assert broker.calls[-1] == (methods.ENGINE_SCHEDULER.name, {})


def test_verbose_with_node_asks_the_member_for_its_schedulers(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["engines", "-v", "--node", "bob"]) == exit_codes.OK
    engine_calls = [call for call in broker.calls if call[0].startswith("engine:")]
    assert engine_calls == [
        (methods.ENGINE_LIST.name, {"node": BOB}),
        (methods.ENGINE_SCHEDULER.name, {"node": BOB}),
    ]
    assert "  turn       qwen (loaded)" in capsys.readouterr().out


def test_without_verbose_no_scheduler_is_asked_for_or_shown(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["engines"]) == exit_codes.OK
    assert methods.ENGINE_SCHEDULER.name not in broker.methods_called
    assert len(capsys.readouterr().out.splitlines()) == 4


def test_a_broker_without_schedulers_lists_the_engines_and_says_so(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.answer(methods.ENGINE_SCHEDULER.name, errors.MethodNotFound("engine:scheduler"))
    assert main(["engines", "--verbose", "--node", "bob"]) == exit_codes.OK
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 4
    assert err.strip() == "(the PAIR service on bob does not report schedulers)"


def test_a_scheduler_of_an_engine_the_list_left_out_is_still_shown(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.answer(methods.ENGINE_LIST.name, [])
    assert main(["engines", "--verbose"]) == exit_codes.OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:] == ["llamacpp  (not listed)", *scheduler_lines(BUSY_LLAMACPP)]


def test_parked_conversations_are_counted_with_the_slot_owners() -> None:
    state = SchedulerState(
        engine=EngineName("llamacpp"),
        single_model=True,
        ceiling=2,
        slot_owners=SlotOwners(sessions=2, keyless=0, fresh=0, parked=3),
    )
    assert any(
        "2 sessions, 0 keyless, 0 fresh, 3 parked" in line for line in scheduler_lines(state)
    )
