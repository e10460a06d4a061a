"""Model actions of an engine whose models PAIR keeps itself (a manifest's ``model_store``).

Such an engine (llama.cpp) serves one file of its store at a time, under the file's short
name: listing and pulling work on the store whether the engine runs or not, loading relaunches
the engine on another model (through the exclusive gate, as a ``switch``), deleting removes a
file, and the model being served cannot be unloaded or deleted while it is served.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from backend.components.engines import actions
from backend.components.engines.actions import ModelListing, ProgressSink
from backend.components.engines.exclusive import ExclusiveGate
from backend.components.engines.model_store import ModelStore, name_from_url, valid_name
from backend.protocol import errors
from backend.protocol.types.engines import EngineActionName, EngineActionResult

if TYPE_CHECKING:
    from backend.components.engines.controller import EngineController

_URL_SCHEMES = ("http://", "https://")
_SPLIT_PART = re.compile(r"-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)
_LIST_TIMEOUT_S = 30.0


def store_of(engine: EngineController) -> ModelStore:
    """The engine's model store (callers dispatch on it being there)."""
    assert engine.store is not None, "only an engine with a model store gets here"
    return engine.store


async def listing(engine: EngineController) -> ModelListing:
    """The store's models with their sizes and what their files say about them."""
    stored = await asyncio.to_thread(store_of(engine).list)
    return ModelListing(
        [model.name for model in stored],
        {model.name: model.size for model in stored},
        {model.name: model.details for model in stored},
    )


async def loaded(engine: EngineController, timeout: float) -> list[str]:
    """The model the engine serves: the one PAIR launched it with, or what an engine PAIR
    found running says it serves."""
    if engine.current_model is not None:
        return [engine.current_model]
    if engine.running and engine.status().adopted and "loaded_models" in engine.manifest.actions:
        return await actions.list_names(engine, "loaded_models", timeout)
    return []


def pull_source(model: str | None, url: str | None) -> tuple[str, str]:
    """(name, URL) of a pull: ``url`` saved as ``model`` (or the name the URL suggests), or
    ``model`` itself when it is an http(s) URL."""
    given = (model or "").strip()
    if url:
        refuse_split(url)
        return (valid_name(given) if given else name_from_url(url)), url
    if given.startswith(_URL_SCHEMES):
        refuse_split(given)
        return name_from_url(given), given
    raise errors.InvalidParams(
        "this engine pulls model files from a URL; give the URL of a .gguf file "
        "(`pair model pull ENGINE URL`, or a name with `--url URL`)"
    )


def refuse_split(url: str) -> None:
    """``InvalidParams`` for one part of a split model (``-00001-of-00003.gguf``): the store
    holds one file per model, and a part alone cannot be loaded."""
    match = _SPLIT_PART.search(urlsplit(url).path)
    if match is None or int(match["total"]) < 2:
        return
    raise errors.InvalidParams(
        f"this file is part {int(match['part'])} of a model split in {int(match['total'])} "
        "files, which PAIR's llama.cpp store cannot hold yet; choose a single-file "
        "quantization (`pair model files OWNER/NAME` lists them)"
    )


def serving_refusal(engine: EngineController, model: str) -> errors.Conflict | None:
    """Why ``model`` cannot be deleted now: the engine serves it."""
    if engine.current_model != model:
        return None
    return errors.Conflict(
        f"{model} is the model {engine.manifest.display_name} serves right now; load another "
        "model or stop the engine before deleting it",
        {"engine": engine.name, "model": model},
    )


def unload_refusal(engine: EngineController) -> errors.Conflict:
    """A one-model engine always holds its model while it runs."""
    return errors.Conflict(
        f"{engine.manifest.display_name} holds one model at a time: load another model or stop "
        "the engine",
        {"engine": engine.name},
    )


async def run_store_action(
    engine: EngineController,
    name: EngineActionName,
    model: str | None,
    *,
    url: str | None,
    sha256: str | None,
    gate: ExclusiveGate,
    progress: ProgressSink,
    across: tuple[str, ...] | None = None,
) -> EngineActionResult:
    """``engine:action`` of a store engine; only load and delete wait for the gate."""
    if name == "list_models":
        return EngineActionResult(ok=True, names=(await listing(engine)).names)
    if name == "loaded_models":
        return EngineActionResult(ok=True, names=await loaded(engine, _LIST_TIMEOUT_S))
    if name == "pull_model":
        target, source = pull_source(model, url)
        await store_of(engine).pull(
            engine.session, source, target, sha256=sha256, progress=progress, engine=engine.name
        )
        return EngineActionResult(ok=True)
    chosen = valid_name((model or "").strip()) if model and model.strip() else None
    if chosen is None:
        raise errors.InvalidParams(f"{name} needs a model name")
    if name == "unload_model":
        raise unload_refusal(engine)
    await asyncio.to_thread(store_of(engine).get, chosen)  # NotFound before waiting at the gate
    if name == "load_model":
        async with gate.hold(engine.name, "switch", chosen):
            await engine.switch_model(chosen, across)
        return EngineActionResult(ok=True)
    return await _delete(engine, chosen, gate)


async def _delete(engine: EngineController, model: str, gate: ExclusiveGate) -> EngineActionResult:
    refusal = serving_refusal(engine, model)
    if refusal is not None:
        raise refusal
    async with gate.hold(engine.name, "delete", model):
        refusal = serving_refusal(engine, model)  # the engine may have switched meanwhile
        if refusal is not None:
            raise refusal
        await asyncio.to_thread(store_of(engine).delete, model)
    return EngineActionResult(ok=True, restarted=False)
