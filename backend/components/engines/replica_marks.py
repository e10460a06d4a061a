"""Which loaded models a replica planner put on this node's engines, as a frozen value moved
only by the pure ``apply(state, event)``, and the holder the engines component keeps.

A model loaded through ``engine:action`` ``load_model`` with ``replica`` is marked once the load
succeeded; the mark is what lets a planner unload it again once idle. The user's own load of
the same model clears the mark, since PAIR never unloads what the user loaded. An unload, a
delete, the engine stopping or crashing, and the engine no longer listing the model loaded all
clear it too. A one-model engine (llama.cpp) replaces its model on a load: the mark remembers
the model it replaced, so unloading the replica switches the engine back to that model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import assert_never

import msgspec

from backend.core.clock import Clock
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineState, ReplicaMark

# An engine in one of these states serves nothing: its marks go (a relaunch excepted).
_DOWN_STATES: frozenset[EngineState] = frozenset({"stopped", "error", "not-installed"})


class Marked(msgspec.Struct, frozen=True):
    """One marked model of one engine. ``replaced``: the model a one-model engine served
    before the replica replaced it (None: nothing, or an engine holding several models);
    ``previous``: that model's own mark when it was a replica too."""

    engine: str
    model: str
    mark: ReplicaMark
    replaced: str | None = None
    previous: Marked | None = None


class Marks(msgspec.Struct, frozen=True):
    """Every mark of this node's engines."""

    entries: tuple[Marked, ...] = ()

    def find(self, engine: str, model: str) -> Marked | None:
        """The mark of ``model`` on ``engine``, if any."""
        for entry in self.entries:
            if entry.engine == engine and entry.model == model:
                return entry
        return None


class ReplicaLoaded(msgspec.Struct, frozen=True):
    """A replica load succeeded. ``resident``: the model was loaded already (the user's, so
    nothing is marked); ``replaced``: what a one-model engine served before (None: nothing or
    an engine holding several models)."""

    engine: str
    model: str
    mark: ReplicaMark
    single_model: bool = False
    resident: bool = False
    replaced: str | None = None


class UserLoaded(msgspec.Struct, frozen=True):
    """The user's load succeeded: the model is the user's now."""

    engine: str
    model: str
    single_model: bool = False


class ModelUnloaded(msgspec.Struct, frozen=True):
    """An unload or delete of ``model`` succeeded."""

    engine: str
    model: str


class SwitchedBack(msgspec.Struct, frozen=True):
    """A one-model engine's replica was unloaded by serving again the model it replaced."""

    engine: str
    model: str


class EngineDown(msgspec.Struct, frozen=True):
    """The engine stopped or crashed."""

    engine: str


class LoadedListed(msgspec.Struct, frozen=True):
    """What each engine listed as loaded; an engine absent serves nothing."""

    loaded: Mapping[str, Sequence[str]]


MarkEvent = ReplicaLoaded | UserLoaded | ModelUnloaded | SwitchedBack | EngineDown | LoadedListed


def apply(state: Marks, event: MarkEvent) -> Marks:
    """The marks after ``event`` (a pure function)."""
    if isinstance(event, ReplicaLoaded):
        return _replica_loaded(state, event)
    if isinstance(event, UserLoaded):
        if event.single_model:
            return _without(state, lambda entry: entry.engine == event.engine)
        return _without(state, lambda entry: (entry.engine, entry.model) == _key(event))
    if isinstance(event, ModelUnloaded):
        return _without(state, lambda entry: (entry.engine, entry.model) == _key(event))
    if isinstance(event, SwitchedBack):
        found = state.find(event.engine, event.model)
        rest = _without(state, lambda entry: entry.engine == event.engine)
        if found is None or found.previous is None:
            return rest
        return Marks((*rest.entries, found.previous))
    if isinstance(event, EngineDown):
        return _without(state, lambda entry: entry.engine == event.engine)
    if isinstance(event, LoadedListed):
        return _without(state, lambda entry: entry.model not in event.loaded.get(entry.engine, ()))
    assert_never(event)


def _replica_loaded(state: Marks, event: ReplicaLoaded) -> Marks:
    """Mark the model, unless it was the user's already or is marked already; a one-model
    engine's other marks go with the model it no longer serves."""
    if event.resident or state.find(event.engine, event.model) is not None:
        return state
    previous = state.find(event.engine, event.replaced) if event.replaced is not None else None
    marked = Marked(event.engine, event.model, event.mark, event.replaced, previous)
    if event.single_model:
        state = _without(state, lambda entry: entry.engine == event.engine)
    return Marks((*state.entries, marked))


def _key(event: UserLoaded | ModelUnloaded) -> tuple[str, str]:
    return event.engine, event.model


def _without(state: Marks, gone: Callable[[Marked], bool]) -> Marks:
    kept = tuple(entry for entry in state.entries if not gone(entry))
    return state if len(kept) == len(state.entries) else Marks(kept)


def marks_by_engine(state: Marks) -> dict[EngineName, dict[str, ReplicaMark]]:
    """``EngineModels.replicas_by_engine``: engine -> model -> mark (a pure function)."""
    by_engine: dict[EngineName, dict[str, ReplicaMark]] = {}
    for entry in state.entries:
        by_engine.setdefault(EngineName(entry.engine), {})[entry.model] = entry.mark
    return by_engine


class ReplicaMarks:
    """The engines component's marks: the I/O around it records events, ``marks`` reads them.
    ``clock``'s wall time stamps a mark's ``loaded_at``; ``on_change`` hears that a mark came
    or went (the component lists its models again, so subscribers see it)."""

    def __init__(self, clock: Clock, *, on_change: Callable[[], None] = lambda: None) -> None:
        self._state = Marks()
        self._clock = clock
        self._on_change = on_change

    def now(self) -> float:
        """Wall time for a new mark."""
        return self._clock.wall()

    @property
    def state(self) -> Marks:
        """The marks now."""
        return self._state

    def record(self, event: MarkEvent) -> None:
        """Apply ``event``; tell ``on_change`` when the marks changed."""
        before = self._state
        self._state = apply(before, event)
        if self._state != before:
            self._on_change()

    def engine_changed(self, engine: str, state: EngineState, *, relaunching: bool) -> None:
        """An engine's state changed: one that stopped or crashed (not one PAIR relaunches on
        purpose) loses its marks."""
        if state in _DOWN_STATES and not relaunching:
            self.record(EngineDown(engine))

    def marks(
        self, loaded: Mapping[EngineName, Sequence[str]] | Mapping[str, Sequence[str]] | None = None
    ) -> dict[EngineName, dict[str, ReplicaMark]]:
        """engine -> model -> mark; with ``loaded`` (what each engine lists as loaded), marks
        of models no longer loaded go first (quietly: the caller is publishing the listing)."""
        if loaded is not None:
            listed = {str(engine): models for engine, models in loaded.items()}
            self._state = apply(self._state, LoadedListed(listed))
        return marks_by_engine(self._state)

    def entry(self, engine: str, model: str) -> Marked | None:
        """The mark of ``model`` on ``engine`` with what it replaced; None: not a replica."""
        return self._state.find(engine, model)
