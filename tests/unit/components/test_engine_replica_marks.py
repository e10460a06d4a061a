"""Replica marks as a pure value: a replica load marks, the user's load clears, an unload, a
delete, the engine going down or no longer listing the model clear, and a one-model engine
remembers what its replica replaced."""

from __future__ import annotations

from backend.components.engines.replica_marks import (
    EngineDown,
    LoadedListed,
    MarkEvent,
    Marks,
    ModelUnloaded,
    ReplicaLoaded,
    ReplicaMarks,
    SwitchedBack,
    UserLoaded,
    apply,
    marks_by_engine,
)
from backend.protocol.types.base import NodeId
from backend.protocol.types.engines import ReplicaMark
from tests.fakes import FakeClock

MARK = ReplicaMark(loaded_at=100.0, reason="qwen2.5:7b waited 18 s on gpu-box", by=NodeId("n1"))
OTHER = ReplicaMark(loaded_at=50.0, reason="llama3 waited 12 s on laptop")


def _loaded(*events: MarkEvent) -> Marks:
    state = Marks()
    for event in events:
        state = apply(state, event)
    return state


def test_a_replica_load_marks_the_model() -> None:
    state = _loaded(ReplicaLoaded("ollama", "qwen", MARK))
    assert marks_by_engine(state) == {"ollama": {"qwen": MARK}}


def test_a_model_loaded_already_is_the_users_and_stays_unmarked() -> None:
    state = _loaded(ReplicaLoaded("ollama", "qwen", MARK, resident=True))
    assert marks_by_engine(state) == {}


def test_a_second_replica_load_keeps_the_first_mark() -> None:
    state = _loaded(ReplicaLoaded("ollama", "qwen", MARK), ReplicaLoaded("ollama", "qwen", OTHER))
    assert marks_by_engine(state) == {"ollama": {"qwen": MARK}}


def test_the_users_load_of_the_same_model_clears_only_its_mark() -> None:
    state = _loaded(
        ReplicaLoaded("ollama", "qwen", MARK),
        ReplicaLoaded("ollama", "llama3", OTHER),
        UserLoaded("ollama", "qwen"),
    )
    assert marks_by_engine(state) == {"ollama": {"llama3": OTHER}}


def test_an_unload_or_delete_clears_the_mark() -> None:
    marked = _loaded(ReplicaLoaded("ollama", "qwen", MARK), ReplicaLoaded("lmstudio", "qwen", MARK))
    state = apply(marked, ModelUnloaded("ollama", "qwen"))
    assert marks_by_engine(state) == {"lmstudio": {"qwen": MARK}}


def test_the_engine_going_down_clears_its_marks_only() -> None:
    marked = _loaded(ReplicaLoaded("ollama", "qwen", MARK), ReplicaLoaded("lmstudio", "qwen", MARK))
    assert marks_by_engine(apply(marked, EngineDown("ollama"))) == {"lmstudio": {"qwen": MARK}}


def test_a_model_no_longer_listed_loaded_loses_its_mark() -> None:
    marked = _loaded(
        ReplicaLoaded("ollama", "qwen", MARK), ReplicaLoaded("ollama", "llama3", OTHER)
    )
    state = apply(marked, LoadedListed({"ollama": ["llama3"]}))
    assert marks_by_engine(state) == {"ollama": {"llama3": OTHER}}
    assert marks_by_engine(apply(state, LoadedListed({}))) == {}


def test_a_one_model_engine_remembers_what_the_replica_replaced() -> None:
    state = _loaded(ReplicaLoaded("llamacpp", "beta", MARK, single_model=True, replaced="alpha"))
    found = state.find("llamacpp", "beta")
    assert found is not None and (found.replaced, found.previous) == ("alpha", None)


def test_a_one_model_engine_loading_another_model_drops_the_replaced_ones_mark() -> None:
    state = _loaded(
        ReplicaLoaded("llamacpp", "beta", OTHER, single_model=True, replaced="alpha"),
        ReplicaLoaded("llamacpp", "gamma", MARK, single_model=True, replaced="beta"),
    )
    assert marks_by_engine(state) == {"llamacpp": {"gamma": MARK}}
    back = apply(state, SwitchedBack("llamacpp", "gamma"))
    assert marks_by_engine(back) == {"llamacpp": {"beta": OTHER}}, "beta was a replica too"
    found = back.find("llamacpp", "beta")
    assert found is not None and found.replaced == "alpha"


def test_a_user_load_on_a_one_model_engine_clears_every_mark_of_it() -> None:
    state = _loaded(
        ReplicaLoaded("llamacpp", "beta", MARK, single_model=True, replaced="alpha"),
        UserLoaded("llamacpp", "alpha", single_model=True),
    )
    assert marks_by_engine(state) == {}


def test_switching_back_from_a_replica_that_replaced_the_users_model_leaves_no_mark() -> None:
    state = _loaded(
        ReplicaLoaded("llamacpp", "beta", MARK, single_model=True, replaced="alpha"),
        SwitchedBack("llamacpp", "beta"),
    )
    assert state == Marks()


def test_the_holder_tells_of_changes_and_ignores_a_relaunch() -> None:
    changes: list[None] = []
    holder = ReplicaMarks(FakeClock(5.0), on_change=lambda: changes.append(None))
    holder.record(ReplicaLoaded("llamacpp", "beta", MARK, single_model=True))
    holder.record(ReplicaLoaded("llamacpp", "beta", MARK, single_model=True))
    assert len(changes) == 1, "the same mark again changes nothing"
    holder.engine_changed("llamacpp", "stopped", relaunching=True)
    holder.engine_changed("llamacpp", "starting", relaunching=False)
    assert holder.marks() == {"llamacpp": {"beta": MARK}}
    holder.engine_changed("llamacpp", "error", relaunching=False)
    assert holder.marks() == {} and len(changes) == 2


def test_the_holder_drops_marks_of_models_no_longer_loaded_when_read() -> None:
    holder = ReplicaMarks(FakeClock(5.0))
    holder.record(ReplicaLoaded("ollama", "qwen", MARK))
    assert holder.marks({"ollama": ["qwen"]}) == {"ollama": {"qwen": MARK}}
    assert holder.marks({"ollama": []}) == {}
    assert holder.entry("ollama", "qwen") is None
