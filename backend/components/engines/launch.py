"""What a one-model engine is launched with: the model of its store, and the user's settings.

An engine with a ``model_store`` (llama.cpp) serves exactly one of the store's files, under the
store's short name. The settings ``<engine>_parallel``, ``<engine>_context`` and
``<engine>_model`` say with how many slots, how much context and which model it starts; a
model loaded through PAIR becomes the ``<engine>_model`` setting, so the next start uses it.

llama-server runs with ``--embeddings`` so that one server answers chat and embeddings alike
(it switches embedding output on per request, so chat is unchanged). Its ``/v1/embeddings``
needs one vector per input, which pooling ``none`` (every generative model's default) refuses:
a model that declares its pooling (``<arch>.pooling_type``, embedding models) keeps it, any
other gets the manifest's ``pooling`` parameter, ``last``: what decoder-only embedding models
use, and the one pooling llama-server splits over several batches (``mean`` refuses an input
longer than one batch, 512 tokens).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

import msgspec

from backend.components.engines.model_store import ModelStore, StoredModel
from backend.protocol import errors
from backend.protocol.types.base import EngineName
from backend.protocol.types.settings import SettingValue

log = logging.getLogger(__name__)


class LaunchSettings(msgspec.Struct, frozen=True):
    """The user's choice for launching a one-model engine; ``model`` empty: the store's first."""

    parallel: int
    context: int
    model: str = ""


class LaunchPlan(msgspec.Struct, frozen=True):
    """One launch of a store engine: the model it serves and the settings it ran with."""

    model: str
    path: Path
    settings: LaunchSettings | None
    pooling: str | None = None  # the model's own; None: the manifest's

    def values(self) -> dict[str, str]:
        """The placeholders this launch fills: ``{model}``, ``{model_path}``, when the model
        declares it ``{pooling}`` and, when the settings say, ``{parallel}`` and ``{context}``."""
        values = {"model": self.model, "model_path": str(self.path)}
        if self.pooling is not None:
            values["pooling"] = self.pooling
        if self.settings is not None:
            values["parallel"] = str(self.settings.parallel)
            values["context"] = str(self.settings.context)
        return values

    def differs(self, settings: LaunchSettings | None) -> bool:
        """Whether ``settings`` would launch with other slots or context than this launch."""
        if settings is None or self.settings is None:
            return False
        launched = (self.settings.parallel, self.settings.context)
        return launched != (settings.parallel, settings.context)


class EngineSettings(Protocol):
    """The settings of one-model engines, read at every launch."""

    def launch(self, engine: EngineName) -> LaunchSettings | None:
        """The engine's launch settings, or None when it has none (the manifest's apply)."""
        ...

    def remember_model(self, engine: EngineName, model: str) -> None:
        """Make ``model`` the one the engine starts with from now on."""
        ...


class NoSettings:
    """No settings service (unit tests): the manifest's parameters, nothing remembered."""

    def launch(self, engine: EngineName) -> LaunchSettings | None:
        """None: launch with the manifest's parameters."""
        return None

    def remember_model(self, engine: EngineName, model: str) -> None:
        """Nothing to remember into."""


class SettingsValues:
    """``<engine>_parallel``, ``<engine>_context`` and ``<engine>_model`` of the settings
    service's values (an engine without them has no launch settings)."""

    def __init__(
        self,
        values: Callable[[], Mapping[str, SettingValue]],
        update: Callable[[Mapping[str, object]], object],
    ) -> None:
        self._values = values
        self._update = update

    def launch(self, engine: EngineName) -> LaunchSettings | None:
        """The engine's launch settings, read now."""
        values = self._values()
        parallel, context = values.get(f"{engine}_parallel"), values.get(f"{engine}_context")
        if not isinstance(parallel, int) or not isinstance(context, int):
            return None
        model = values.get(f"{engine}_model")
        return LaunchSettings(parallel, context, model if isinstance(model, str) else "")

    def remember_model(self, engine: EngineName, model: str) -> None:
        """Save ``model`` as the ``<engine>_model`` setting, when the engine has one."""
        key = f"{engine}_model"
        if key in self._values():
            self._update({key: model})


def empty_store_message(display_name: str, engine: EngineName, root: Path) -> str:
    """What to do when the store holds no model."""
    return (
        f"{display_name} has no model to serve: its model store {root} is empty. Get one with "
        f"`pair model pull {engine} <URL of a .gguf file>` (`pair model search NAME` finds one)"
    )


async def plan(
    store: ModelStore,
    settings: LaunchSettings | None,
    model: str | None,
    *,
    engine: EngineName,
    display_name: str,
) -> LaunchPlan:
    """The launch of ``model`` (None: the settings' model, else the store's first by name).

    A ``model`` not in the store raises ``NotFound``; a remembered model that is gone gives
    way to the first one, since the user did not ask for it now.
    """
    stored = await asyncio.to_thread(store.list)
    if not stored:
        raise errors.NotFound(
            empty_store_message(display_name, engine, store.root),
            {"engine": engine, "action": "pull_model"},
        )
    if model is not None:
        chosen = await asyncio.to_thread(store.get, model)
        return LaunchPlan(chosen.name, chosen.path, settings, chosen.pooling)
    chosen = _remembered_or_first(stored, settings, engine)
    return LaunchPlan(chosen.name, chosen.path, settings, chosen.pooling)


def _remembered_or_first(
    stored: list[StoredModel], settings: LaunchSettings | None, engine: EngineName
) -> StoredModel:
    wanted = settings.model if settings is not None else ""
    for candidate in stored:
        if candidate.name == wanted:
            return candidate
    if wanted:
        log.warning(
            "%s: the model %r to start with is not in the store; starting %s",
            engine,
            wanted,
            stored[0].name,
        )
    return stored[0]
