"""The identity of each engine's models by their weights: ``sha256:<hex>`` per model.

Models with the same digest are replicas of one model, whatever their names or engines. Where
each engine's digests come from:

- an engine with a model store (llama.cpp): the SHA-256 of each ``.gguf`` file of the store
  (``digests_files.py``: cached with the file's size and mtime, hashed in the background);
- Ollama: the weights blob its Modelfile is built from (``ollama_digest.py``);
- others (LM Studio): a model file its listing names by a ``path`` that exists on this
  computer, hashed as a store file is; none otherwise.

Digests never delay a listing: the engines component lists and publishes at once with the
digests known so far, and refreshes them in the background after each listing; a refresh that
learns something new asks the component to list again (``on_changed``), which publishes them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.common.tasks import TaskSet
from backend.components.engines.digests_files import FileDigests
from backend.components.engines.http import request_json
from backend.components.engines.manifest import ResultSpec
from backend.components.engines.ollama_digest import SHOW_TIMEOUT_S, OllamaDigests
from backend.protocol import errors
from backend.protocol.types.base import EngineName

if TYPE_CHECKING:
    from backend.components.engines.controller import EngineController

log = logging.getLogger(__name__)

OLLAMA = "ollama"


class EngineDigests:
    """Owns the background work behind the digests: the file hasher (one task and its worker
    thread, ``FileDigests``), one refresh task per engine at a time and Ollama's show answers.
    ``on_changed`` is called on the event loop when an engine's digests change."""

    def __init__(self, cache_path: Path, on_changed: Callable[[], None]) -> None:
        self._on_changed = on_changed
        self._files = FileDigests(cache_path, self._on_hashed)
        self._ollama: dict[str, OllamaDigests] = {}
        self._known: dict[str, dict[str, str]] = {}
        self._tasks = TaskSet("engines:digests-refresh")
        self._refreshing: set[str] = set()
        self._again: set[str] = set()
        self._last: dict[str, tuple[EngineController, list[str]]] = {}
        self._closing = False

    def current(
        self, listed: Mapping[EngineName, Sequence[str]]
    ) -> dict[EngineName, dict[str, str]]:
        """The digests known now of the models ``listed`` per engine (no I/O); engines with none
        are left out."""
        found: dict[EngineName, dict[str, str]] = {}
        for engine, names in listed.items():
            known = self._known.get(engine, {})
            digests = {name: known[name] for name in names if name in known}
            if digests:
                found[engine] = digests
        return found

    def refresh_nowait(self, listed: Sequence[tuple[EngineController, list[str]]]) -> None:
        """Refresh, in the background, the digests of each engine's listed models; an engine
        whose refresh is under way is refreshed once more after it."""
        if self._closing:
            return
        for controller, names in listed:
            self._last[controller.name] = (controller, list(names))
            if controller.name in self._refreshing:
                self._again.add(controller.name)
                continue
            self._refreshing.add(controller.name)
            self._tasks.spawn(self._refresh(controller.name), name=controller.name)

    async def close(self) -> None:
        """Stop the refreshes and the hashing (none starts meanwhile); usable again after."""
        self._closing = True
        try:
            await self._tasks.close()
            await self._files.close()
        finally:
            for state in (self._refreshing, self._again, self._last, self._known, self._ollama):
                state.clear()
            self._closing = False

    def _on_hashed(self) -> None:
        """A file was hashed: refresh the engines whose digests are files' (not Ollama's)."""
        files = [entry for entry in self._last.values() if entry[0].manifest.engine != OLLAMA]
        self.refresh_nowait(files)

    async def _refresh(self, engine: str) -> None:
        try:
            while True:
                self._again.discard(engine)
                controller, names = self._last[engine]
                try:
                    digests = await self._digests_of(controller, names)
                except errors.RpcError as exc:
                    log.debug("keeping the last digests of %s: %s", engine, exc)
                    digests = self._known.get(engine, {})
                if digests != self._known.get(engine, {}):
                    self._known[engine] = digests
                    self._on_changed()
                if engine not in self._again:
                    return
        finally:
            self._refreshing.discard(engine)

    async def _digests_of(self, controller: EngineController, names: list[str]) -> dict[str, str]:
        if controller.store is not None:
            return await self._files.lookup(store_paths(controller, names))
        if not controller.running:
            return self._known.get(controller.name, {})
        if controller.manifest.engine == OLLAMA:
            ollama = self._ollama.setdefault(controller.name, OllamaDigests())
            return await ollama.refresh(controller.endpoint())
        return await self._files.lookup(await self._listed_paths(controller))

    async def _listed_paths(self, controller: EngineController) -> dict[str, Path]:
        """The model files an engine's own listing names (LM Studio), where it names any."""
        action = controller.manifest.actions.get("list_models")
        if action is None or action.http is None or action.result is None:
            return {}
        http = action.http
        document = await request_json(
            controller.endpoint(), http.method, http.path, None, timeout=SHOW_TIMEOUT_S
        )
        models_dir = controller.placeholder_values()["models_dir"]
        return listed_paths(document, action.result, Path(models_dir) if models_dir else None)


def store_paths(controller: EngineController, names: Sequence[str]) -> dict[str, Path]:
    """Each listed store model's file (a name that cannot name a file is left out)."""
    store = controller.store
    found: dict[str, Path] = {}
    if store is None:
        return found
    for name in names:
        try:
            found[name] = store.path(name)
        except errors.InvalidParams:
            continue
    return found


def listed_paths(document: Any, spec: ResultSpec, models_dir: Path | None) -> dict[str, Path]:
    """Model -> file from the ``path`` member of a listing's entries: an absolute path as it
    is, a relative one (LM Studio's ``publisher/repo/file.gguf``) inside ``models_dir``; entries
    without one, or whose path leaves ``models_dir``, are left out (a pure function)."""
    items = document.get(spec.array) if isinstance(document, dict) else None
    found: dict[str, Path] = {}
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        name, text = item.get(spec.field), item.get("path")
        if not isinstance(name, str) or not isinstance(text, str) or not text:
            continue
        path = Path(text)
        if not path.is_absolute():
            if models_dir is None or ".." in path.parts:
                continue
            path = models_dir / path
        found.setdefault(name, path)
    return found
