"""The welcome dialog's first model: one small chat model from the shipped catalogue that fits
this computer, pulled through the Models page's pull path, then made ready to answer.

The choice and the step's state are plain functions of what the stores say
(``first_model_state``); ``FirstModelController`` only watches the stores, starts the pull
(and, for llama.cpp, the load that makes the engine serve the new file) and says when the state
changed. It owns no task: the models controller runs the commands.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

import msgspec
from PySide6.QtCore import QObject, Signal

from app.catalog import Catalog, CatalogEntry, PullEngine, pulled_name
from app.controllers.activity import ActivityController
from app.controllers.hub import Memory, card_memory
from app.controllers.models import ModelsController
from app.models.models import engine_order
from app.models.nodes import NodesModel
from app.models.pulls import PullRow, plain_pull_error
from app.pending import PendingKey
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineModels, EngineStatus

LLAMACPP: PullEngine = "llamacpp"
OLLAMA: PullEngine = "ollama"
# Small chat models that download in minutes, the better first: the first that fits is offered.
FIRST_MODEL_IDS = ("qwen2.5-1.5b", "qwen2.5-0.5b")
# A first model takes at most this share of the memory, so the computer stays usable around it
# (the OS, the apps, the engine's context cache).
MEMORY_SHARE = 8

Phase = Literal["no_engine", "offer", "pulling", "loading", "failed", "ready", "have_one"]


class FirstModel(msgspec.Struct, frozen=True):
    """The model offered: its catalogue entry and the engine it goes to."""

    entry: CatalogEntry
    engine: PullEngine

    @property
    def source(self) -> str:
        """What the pull asks for: a name (Ollama) or a model file's address (llama.cpp)."""
        return self.entry.engines[self.engine]

    @property
    def name(self) -> str:
        """The name the engine lists it under once pulled."""
        return pulled_name(self.source)


class Here(msgspec.Struct, frozen=True):
    """What the stores say about this computer, as far as the first model cares."""

    statuses: Mapping[EngineName, EngineStatus]
    models: EngineModels | None
    memory: Memory | None = None
    connected: bool = True  # commands can reach the broker (this node's id is known)
    installing: bool = False  # llama.cpp's install is on its way
    started: FirstModel | None = None  # the pull this step started
    pull: PullRow | None = None  # its progress row (kept with the reason once it failed)
    load_error: str | None = None  # why loading it into llama.cpp failed


class FirstModelState(msgspec.Struct, frozen=True):
    """Where the step stands: the model offered or pulled, the one to try, progress or error."""

    phase: Phase
    model: FirstModel | None = None
    ready_model: str | None = None  # the model the Try it step opens
    ready_engine: EngineName | None = None
    pull: PullRow | None = None
    error: str = ""
    memory: Memory | None = None
    can_pull: bool = False  # Pull (or Try again) would start a pull now


def pull_engine(statuses: Mapping[EngineName, EngineStatus], installing: bool) -> PullEngine | None:
    """llama.cpp when it is installed or being installed (its store takes a file either way),
    else Ollama when it runs; None when neither can take a model now."""
    llamacpp = statuses.get(EngineName(LLAMACPP))
    if installing or (llamacpp is not None and llamacpp.installed):
        return LLAMACPP
    ollama = statuses.get(EngineName(OLLAMA))
    return OLLAMA if ollama is not None and ollama.state == "running" else None


def choose_model(
    entries: Iterable[CatalogEntry], engine: PullEngine, memory: Memory | None
) -> FirstModel | None:
    """The best first model ``engine`` can pull that fits ``memory`` (its share of it); the
    smallest when the memory is unknown or none fits; None when the catalogue has none."""
    by_id = {entry.id: entry for entry in entries if engine in entry.engines}
    shortlist = [by_id[model_id] for model_id in FIRST_MODEL_IDS if model_id in by_id]
    if not shortlist:
        return None
    for entry in shortlist:
        if memory is not None and entry.size_bytes * MEMORY_SHARE <= memory.size:
            return FirstModel(entry, engine)
    return FirstModel(min(shortlist, key=lambda entry: entry.size_bytes), engine)


def model_here(models: EngineModels | None) -> tuple[EngineName, str] | None:
    """A model an engine of this computer already has (engines in the app's order)."""
    if models is None:
        return None
    for engine in sorted(models.by_engine, key=engine_order):
        names = models.by_engine[engine]
        if names:
            return engine, sorted(names, key=str.casefold)[0]
    return None


def first_model_state(here: Here, entries: Iterable[CatalogEntry]) -> FirstModelState:
    """The step's state from what the stores say (see ``Phase``)."""
    if here.started is not None:
        return _started_state(here, here.started)
    existing = model_here(here.models)
    if existing is not None:
        return FirstModelState("have_one", ready_model=existing[1], ready_engine=existing[0])
    engine = pull_engine(here.statuses, here.installing)
    model = None if engine is None else choose_model(entries, engine, here.memory)
    if model is None:
        return FirstModelState("no_engine", memory=here.memory)
    return FirstModelState("offer", model, memory=here.memory, can_pull=here.connected)


def _started_state(here: Here, model: FirstModel) -> FirstModelState:
    pull = here.pull
    if pull is not None and pull.failed:
        error = plain_pull_error(pull)
        return FirstModelState("failed", model, pull=pull, error=error, can_pull=here.connected)
    if pull is not None or not _listed(here.models, model):
        return FirstModelState("pulling", model, pull=pull)
    if here.load_error is not None:
        return FirstModelState("failed", model, error=here.load_error, can_pull=here.connected)
    if model.engine == LLAMACPP and not _loaded(here.models, model):
        return FirstModelState("loading", model)
    engine = EngineName(model.engine)
    return FirstModelState("ready", model, ready_model=model.name, ready_engine=engine)


def _listed(models: EngineModels | None, model: FirstModel) -> bool:
    return models is not None and model.name in models.by_engine.get(EngineName(model.engine), [])


def _loaded(models: EngineModels | None, model: FirstModel) -> bool:
    loaded = models.loaded_by_engine.get(EngineName(model.engine), []) if models else []
    return model.name in loaded


class FirstModelController(QObject):
    """Follows the first model's step on this computer; ``pull`` starts it."""

    changed = Signal()

    def __init__(
        self,
        models: ModelsController,
        nodes: NodesModel,
        activity: ActivityController,
        catalog: Catalog,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._models = models
        self._nodes = nodes
        self._activity = activity
        self._entries = catalog.entries
        self._started: FirstModel | None = None
        self._load_asked = False
        self._load_error: str | None = None
        self.state = FirstModelState("no_engine")
        for signal in (models.engines_changed, models.pulls.modelReset, activity.changed):
            signal.connect(self._refresh)
        for signal in (models.pulls.rowsInserted, models.pulls.rowsRemoved):
            signal.connect(self._refresh)
        models.pulls.dataChanged.connect(self._refresh)
        models.pending.changed.connect(self._refresh)
        models.action_failed.connect(self._on_models_action_failed)
        for signal in (nodes.modelReset, nodes.rowsInserted, nodes.dataChanged):
            signal.connect(self._refresh)
        self._refresh()

    def pull(self) -> None:
        """Pull the model offered through the Models page's path; after a failure, pull again
        (or, when the file came but llama.cpp could not load it, load it again)."""
        model = self.state.model
        if not self.state.can_pull or model is None:
            return
        retry_load = self._load_error is not None and self._started == model
        self._started, self._load_asked, self._load_error = model, False, None
        if not retry_load:
            self._models.pull(EngineName(model.engine), model.source)
        self._refresh()

    def _here(self) -> Here:
        store = self._models.engines
        started = self._started
        key = None if started is None else self._key(started)
        return Here(
            statuses=store.statuses,
            models=store.models,
            memory=self._memory(),
            connected=self._models.connected,
            installing=LLAMACPP in self._activity.install_progress,
            started=started,
            pull=None if key is None else self._models.pulls.get(key),
            load_error=self._load_error,
        )

    def _memory(self) -> Memory | None:
        card = next((card for card in self._nodes.cards() if card.is_self), None)
        return None if card is None else card_memory(card)

    def _key(self, model: FirstModel) -> PendingKey | None:
        node = self._models.node_id
        return None if node is None else PendingKey(node, EngineName(model.engine), model.name)

    def _refresh(self, *_args: object) -> None:
        state = first_model_state(self._here(), self._entries)
        if state.phase == "loading":
            self._load_when_installed(state)
        if state != self.state:
            self.state = state
            self.changed.emit()

    def _load_when_installed(self, state: FirstModelState) -> None:
        """Ask llama.cpp once to serve the pulled file; an install on its way starts the
        engine with it by itself."""
        installing = LLAMACPP in self._activity.install_progress
        if self._load_asked or installing or state.model is None:
            return
        key = self._key(state.model)
        status = self._models.engines.statuses.get(EngineName(LLAMACPP))
        if key is None or status is None or not status.installed:
            return
        self._models.load(key)
        # The models controller refuses quietly while another command on the file is pending
        # (the pull's mark, for a moment): then ask again at the next change.
        self._load_asked = self._models.pending.get(key) is not None

    def _on_models_action_failed(self, message: str) -> None:
        if self._load_asked and self.state.phase == "loading":
            self._load_error = message
            self._refresh()
