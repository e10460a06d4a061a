"""The playground: every model of the cluster to pick from, one chat request at a time sent to
this computer's own door on loopback, its answer streamed back with who served it and how fast.

The models and the computers that have them come from the engines store (this computer's
lists and every reachable member's); the door's address from the endpoints controller (the
broker's ``status``); node ids become names through the cluster store. Owns the request's task
and its HTTP session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import msgspec
from PySide6.QtCore import Signal

from app.controllers.door_chat import DoorChatController
from app.controllers.endpoints import door_order
from app.controllers.playground_stream import ChatProgress, ChatResult, stream_chat
from app.controllers.playground_wire import ChatRequest, loopback_url
from backend.protocol.types.engines import EngineModels, MemberEngines

THIS_COMPUTER = "this computer"
PREFERRED_DOOR = "ollama"  # every door reaches every model; this one is the best known


class ModelChoice(msgspec.Struct, frozen=True):
    """A model of the cluster and the computers that have it (this computer first)."""

    name: str
    computers: tuple[str, ...]

    @property
    def label(self) -> str:
        """The picker's text: the model, then where it is."""
        return f"{self.name}  ({', '.join(self.computers)})"


def model_choices(
    local: EngineModels | None, members: Iterable[MemberEngines]
) -> list[ModelChoice]:
    """Every model of this computer and the reachable members, by name, with its computers."""
    where: dict[str, list[str]] = {}
    listings = [(THIS_COMPUTER, local)]
    listings += [(member.name, member.models) for member in members if member.reachable]
    for computer, models in listings:
        if models is None:
            continue
        for names in models.by_engine.values():
            for name in names:
                computers = where.setdefault(name, [])
                if computer not in computers:
                    computers.append(computer)
    return [ModelChoice(name, tuple(where[name])) for name in sorted(where, key=str.lower)]


def door_for(front_doors: dict[str, str]) -> str | None:
    """The loopback URL of the door to use: Ollama's, else the first open one."""
    if not front_doors:
        return None
    door = PREFERRED_DOOR if PREFERRED_DOOR in front_doors else door_order(front_doors)[0]
    return loopback_url(front_doors[door])


def computer_name(node_id: str | None, own_id: str | None, members: Iterable[MemberEngines]) -> str:
    """The name of the node a door names (``X-PAIR-Served-By``)."""
    if node_id is None:
        return "not named by the door"
    if node_id == own_id:
        return THIS_COMPUTER
    return next((m.name for m in members if m.node_id == node_id), node_id)


class PlaygroundController(DoorChatController):
    """Sends the playground's requests (one at a time) and reports their answers."""

    choices_changed = Signal()
    door_changed = Signal()
    answer_started = Signal(object)  # ChatRequest
    text_arrived = Signal(str)
    answer_ended = Signal(object)  # ChatResult

    def _setup(self) -> None:
        self._running: asyncio.Task[None] | None = None
        self.last_request: ChatRequest | None = None
        engines = self._engines
        for signal in (engines.reset, engines.models_changed, engines.member_changed):
            signal.connect(self._on_engines_changed)
        self._endpoints.changed.connect(self.door_changed)

    @property
    def choices(self) -> list[ModelChoice]:
        """Every model of the cluster, with the computers that have it."""
        return model_choices(self._engines.models, self._engines.members.values())

    @property
    def door_url(self) -> str | None:
        """The door requests go to (None while no door is open or known)."""
        return door_for(self._endpoints.front_doors)

    @property
    def busy(self) -> bool:
        """Whether an answer is on its way."""
        return self._running is not None and not self._running.done()

    def computer_name(self, node_id: str | None) -> str:
        """A served-by node id as the user knows it."""
        status = self._cluster.status
        own = status.node_id if status is not None else None
        return computer_name(node_id, own, self._engines.members.values())

    def send(self, request: ChatRequest) -> None:
        """Send ``request`` (stopping any answer still on its way)."""
        self.stop()
        self.last_request = request
        self.answer_started.emit(request)
        self._running = self._tasks.spawn(self._answer(request), name="answer")

    def stop(self) -> None:
        """Stop the answer on its way (the door then stops the engine's work)."""
        if self._running is not None:
            self._running.cancel()

    async def _answer(self, request: ChatRequest) -> None:
        progress = ChatProgress(self._clock)
        try:
            result = await stream_chat(self._http(), request, progress, self._on_text)
        except asyncio.CancelledError:
            if self._current():
                self.answer_ended.emit(progress.ended(cancelled=True))
            raise
        self.answer_ended.emit(result)

    def _current(self) -> bool:
        """Whether this task's answer is the one shown (a new Send replaces an old one)."""
        return asyncio.current_task() is self._running

    def _on_text(self, text: str) -> None:
        if self._current():
            self.text_arrived.emit(text)

    def _on_engines_changed(self, *_args: object) -> None:
        self.choices_changed.emit()


def result_lines(result: ChatResult, served_by: str) -> list[str]:
    """The answer's figures as shown under it."""
    lines = [f"Served by {served_by}"] if result.served_by is not None else []
    if result.first_token_s is not None:
        lines.append(f"first token {result.first_token_s:.2f} s")
    rate = result.tokens_per_s
    if rate is not None:
        counted = "" if result.engine_tokens is not None else " (counted records)"
        lines.append(f"{rate:.1f} tokens/s{counted}")
    if result.total_s is not None and result.tokens:
        lines.append(f"{result.tokens} tokens in {result.total_s:.2f} s")
    return lines
