"""Searches Hugging Face for GGUF models through the broker (``hub:search``, ``hub:files``)
and pulls a chosen file into llama.cpp through the Models page's pull path.

Only the latest search and the latest chosen repository count: an answer to an older one is
dropped, so typing on never shows results of words already gone. The suggestion asks for the
memory of the computer pulls go to (its VRAM when it has a GPU, else its RAM), read from the
nodes model.
"""

from __future__ import annotations

import logging
from typing import Literal

import msgspec
from PySide6.QtCore import QObject, Signal

from app.broker.state import ServiceState
from app.catalog import format_size
from app.controllers.base import Controller
from app.controllers.models import ModelsController
from app.models.hub import HubFilesModel, HubResultsModel
from app.models.models import engine_title
from app.models.nodes import NodeCard, NodesModel
from backend.protocol import methods
from backend.protocol.errors import RpcError, Unavailable
from backend.protocol.types.base import EngineName, NodeId
from backend.protocol.types.hub import HubFile, HubQuery, HubRepoQuery

log = logging.getLogger(__name__)

LLAMACPP = EngineName("llamacpp")
SEARCH_LIMIT = 20
# Hugging Face answers in about a second; the broker bounds its own wait below this.
HUB_CALL_TIMEOUT_S = 60.0
NOT_RUNNING = "The PAIR service is not running: start it to search Hugging Face."
OFFLINE_HINT = (
    "This computer may be offline: the curated list still works, and a .gguf address can be "
    "pulled above once it is back online."
)

Phase = Literal["idle", "busy", "done", "failed"]


class HubState(msgspec.Struct, frozen=True):
    """Where a search (or a repository's file list) stands, and what to tell the user."""

    phase: Phase = "idle"
    subject: str = ""  # the words searched, or the repository chosen
    message: str = ""  # a failure's sentence, or the suggestion's reason


class Memory(msgspec.Struct, frozen=True):
    """The memory a model should fit in on one computer, and which kind it is."""

    size: int
    kind: Literal["VRAM", "RAM"]

    def text(self, where: str) -> str:
        """``8.0 GB of VRAM on this computer``."""
        return f"{format_size(self.size)} of {self.kind} on {where}"


def card_memory(card: NodeCard) -> Memory | None:
    """A computer's memory for a model: the VRAM of its GPUs (llama.cpp splits a model over
    them) when they report it, else its RAM; None when neither is known."""
    vram = sum(gpu.vram_total_bytes or 0 for gpu in card.gpus)
    if vram > 0:
        return Memory(vram, "VRAM")
    if card.memory_total_bytes:
        return Memory(card.memory_total_bytes, "RAM")
    return None


def failure_text(what: str, exc: RpcError) -> str:
    """A failed hub call in a sentence; an unreachable Hugging Face says the computer may be
    offline."""
    text = f"Could not {what}: {exc.message.rstrip('.')}."
    return f"{text} {OFFLINE_HINT}" if isinstance(exc, Unavailable) else text


class HubController(Controller):
    """Owns the search results and the chosen repository's files, and the tasks asking for
    them."""

    search_changed = Signal()  # ``search_state`` or the results changed
    files_changed = Signal()  # ``files_state`` or the files changed

    def __init__(
        self,
        models: ModelsController,
        nodes: NodesModel | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(models.connection, parent)
        self.models = models
        self.nodes = nodes
        self.results = HubResultsModel(self)
        self.files = HubFilesModel(self)
        self.search_state = HubState()
        self.files_state = HubState()
        self._search_turn = 0
        self._files_turn = 0
        models.pull_node_changed.connect(self._on_models_pull_node_changed)

    @property
    def connected(self) -> bool:
        """The broker is ready to be asked."""
        return self.connection.state is ServiceState.READY

    def memory(self) -> Memory | None:
        """The memory of the computer pulls go to, as the nodes model knows it."""
        node = self.models.pull_node or self.models.node_id
        if self.nodes is None or node is None:
            return None
        position = self.nodes.position(node)
        return None if position is None else card_memory(self.nodes.cards()[position])

    def search(self, query: str) -> None:
        """Search repositories whose name holds ``query``'s words (blank: clear the results)."""
        query = " ".join(query.split())
        self._search_turn += 1
        self._files_turn += 1
        self.files.show_files([], None)
        self._set_files(HubState())
        if not query:
            self.results.reset([])
            self._set_search(HubState())
            return
        if not self.connected:
            self._set_search(HubState("failed", query, NOT_RUNNING))
            return
        self._set_search(HubState("busy", query))
        turn = self._search_turn
        self._tasks.spawn(self._search(query, turn), name=f"hub search {query}")

    def choose(self, repo: str) -> None:
        """List ``repo``'s GGUF files with the one suggested for the pull computer's memory."""
        self._files_turn += 1
        self.files.show_files([], None)
        if not self.connected:
            self._set_files(HubState("failed", repo, NOT_RUNNING))
            return
        self._set_files(HubState("busy", repo))
        memory = self.memory()
        query = HubRepoQuery(repo=repo, memory_bytes=memory.size if memory else None)
        turn = self._files_turn
        self._tasks.spawn(self._list_files(query, turn), name=f"hub files {repo}")

    def pull(self, file: HubFile) -> None:
        """Pull ``file`` into llama.cpp on the computer pulls go to."""
        self.models.pull(LLAMACPP, file.url, self.models.pull_node)

    async def _search(self, query: str, turn: int) -> None:
        params = HubQuery(query=query, limit=SEARCH_LIMIT)
        try:
            found = await self.connection.call(methods.HUB_SEARCH, params, HUB_CALL_TIMEOUT_S)
        except RpcError as exc:
            log.info("hub search %r failed: %s", query, exc)
            if turn == self._search_turn:
                self.results.reset([])
                self._set_search(HubState("failed", query, failure_text("search", exc)))
            return
        if turn == self._search_turn:
            self.results.reset(found.models)
            self._set_search(HubState("done", query))

    async def _list_files(self, query: HubRepoQuery, turn: int) -> None:
        try:
            listed = await self.connection.call(methods.HUB_FILES, query, HUB_CALL_TIMEOUT_S)
        except RpcError as exc:
            log.info("hub files of %s failed: %s", query.repo, exc)
            if turn == self._files_turn:
                what = f"list the files of {query.repo}"
                self._set_files(HubState("failed", query.repo, failure_text(what, exc)))
            return
        if turn == self._files_turn:
            self.files.show_files(listed.files, listed.suggested)
            self._set_files(HubState("done", query.repo, listed.reason))

    def _set_search(self, state: HubState) -> None:
        self.search_state = state
        self.search_changed.emit()

    def _set_files(self, state: HubState) -> None:
        self.files_state = state
        self.files_changed.emit()

    def _on_models_pull_node_changed(self) -> None:
        # Another computer has other memory: ask again for its suggestion.
        if self.files_state.phase in ("busy", "done") and self.files_state.subject:
            self.choose(self.files_state.subject)

    def _on_connection_session_changed(self) -> None:
        if self.connection.ownership is not None:
            return
        # No answer comes now: nothing may stay "searching" for ever.
        self._search_turn += 1
        self._files_turn += 1
        if self.search_state.phase == "busy":
            self._set_search(HubState("failed", self.search_state.subject, NOT_RUNNING))
        if self.files_state.phase == "busy":
            self._set_files(HubState("failed", self.files_state.subject, NOT_RUNNING))


def pull_blocker(models: ModelsController, engine: EngineName, node: NodeId | None) -> str | None:
    """Why ``engine`` of ``node`` (None: this computer) cannot pull now, naming what to do
    instead; None when it can."""
    where = models.node_name_of(node)
    title = engine_title(engine)
    if not models.reachable(node):
        if node is None:
            return "The PAIR service is not running: start it to pull models."
        return f"{where} cannot be reached."
    if models.engine_installed(engine, node) is False:
        return (
            f"{title} is not installed on {where}: install it on the Engines page "
            f"(or run `pair engine install {engine}` there)."
        )
    if engine in models.pull_engines(node):
        return None
    return f"{title} is not running on {where}: start it on the Engines page."
