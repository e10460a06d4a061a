"""The inference check: one tiny request to one model of every running engine on every
computer of the cluster, each pinned to its computer and engine (``engine/model@node``, the
door's pin syntax), through this computer's own door; per engine, OK with the time to the
first token, or the door's error in plain words.

The engines and models come from the engines store (this computer's and every reachable
member's), the door from the endpoints controller. Owns the checks' tasks and HTTP session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Literal

import msgspec
from msgspec.structs import replace
from PySide6.QtCore import Signal

from app.controllers.door_chat import DoorChatController
from app.controllers.playground import THIS_COMPUTER, door_for
from app.controllers.playground_stream import ChatProgress, ChatResult, stream_chat
from app.controllers.playground_wire import ChatRequest
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineModels, EngineStatus, MemberEngines

CHECK_PROMPT = "Say OK."
CHECK_MAX_TOKENS = 4
CheckState = Literal["checking", "ok", "failed", "no-model"]


class CheckTarget(msgspec.Struct, frozen=True):
    """One running engine of one computer, and the model to try on it (None: it has none)."""

    computer: str
    node_id: str | None  # None: this computer, while its id is not known
    engine: str
    engine_title: str
    model: str | None

    @property
    def pinned_model(self) -> str:
        """The model name that keeps the request to this engine of this computer."""
        pin = f"{self.engine}/{self.model}"
        return f"{pin}@{self.node_id}" if self.node_id is not None else pin


class CheckRow(msgspec.Struct, frozen=True):
    """One engine's check as shown."""

    target: CheckTarget
    state: CheckState
    result: ChatResult | None = None

    @property
    def outcome(self) -> str:
        """The check's result in words."""
        if self.state == "checking":
            return "Checking…"
        if self.state == "no-model":
            return "No model to try on this engine."
        result = self.result
        if self.state == "ok" and result is not None:
            first = result.first_token_s if result.first_token_s is not None else result.total_s
            return f"OK, first token in {first or 0.0:.2f} s"
        return result.error if result is not None and result.error else "Failed."


def _model_to_try(models: EngineModels | None, engine: EngineName) -> str | None:
    """A loaded model of the engine first (no load wait), else the first it lists."""
    if models is None:
        return None
    loaded = models.loaded_by_engine.get(engine, [])
    listed = models.by_engine.get(engine, [])
    return next(iter(loaded or listed), None)


def _running(
    computer: str, node_id: str | None, engines: Iterable[EngineStatus], models: EngineModels | None
) -> list[CheckTarget]:
    return [
        CheckTarget(
            computer,
            node_id,
            status.engine,
            status.display_name,
            _model_to_try(models, status.engine),
        )
        for status in engines
        if status.state == "running"
    ]


def check_targets(
    own_id: str | None,
    local: Mapping[EngineName, EngineStatus],
    local_models: EngineModels | None,
    members: Iterable[MemberEngines],
) -> list[CheckTarget]:
    """Every running engine of this computer, then of each reachable member (by name)."""
    targets = _running(THIS_COMPUTER, own_id, local.values(), local_models)
    for member in sorted(members, key=lambda m: m.name.lower()):
        if member.reachable:
            targets += _running(member.name, member.node_id, member.engines, member.models)
    return targets


def check_request(door_url: str, target: CheckTarget) -> ChatRequest:
    """The tiny request that checks ``target`` (the OpenAI API: every engine answers it)."""
    return ChatRequest(
        api="openai",
        door_url=door_url,
        model=target.pinned_model,
        user=CHECK_PROMPT,
        max_tokens=CHECK_MAX_TOKENS,
        temperature=0.0,
    )


class InferenceCheckController(DoorChatController):
    """Runs the check of every engine at once and keeps each engine's row up to date."""

    rows_changed = Signal()
    finished = Signal()

    def _setup(self) -> None:
        self.rows: list[CheckRow] = []
        self.note = ""  # why nothing was checked, when nothing was

    @property
    def running(self) -> bool:
        """Whether a check is under way."""
        return any(row.state == "checking" for row in self.rows)

    def check(self) -> None:
        """Check every running engine of every computer (once; ignored while one runs)."""
        if self.running:
            return
        door = door_for(self._endpoints.front_doors)
        status = self._cluster.status
        own = status.node_id if status is not None else None
        targets = check_targets(
            own, self._engines.statuses, self._engines.models, self._engines.members.values()
        )
        self.rows = [CheckRow(t, "checking" if t.model else "no-model") for t in targets]
        self.note = _note(door, targets)
        self.rows_changed.emit()
        for index, row in enumerate(self.rows):
            if row.state == "checking" and door is not None:
                request = check_request(door, row.target)
                self._tasks.spawn(self._check_one(index, request), name="check")
        if not self.running:
            self.finished.emit()

    async def _check_one(self, index: int, request: ChatRequest) -> None:
        try:
            result = await stream_chat(
                self._http(), request, ChatProgress(self._clock), _ignore_text
            )
        except asyncio.CancelledError:
            self._set(index, "failed", ChatResult(error="The check was stopped."))
            raise
        state: CheckState = "ok" if result.error is None and result.chunks > 0 else "failed"
        if state == "failed" and result.error is None:
            result = replace(result, error="The engine answered with no text.")
        self._set(index, state, result)

    def _set(self, index: int, state: CheckState, result: ChatResult) -> None:
        self.rows[index] = replace(self.rows[index], state=state, result=result)
        self.rows_changed.emit()
        if not self.running:
            self.finished.emit()


def _note(door: str | None, targets: list[CheckTarget]) -> str:
    if door is None:
        return "No front door is open: is PAIR's service running?"
    if not targets:
        return "No engine is running on any computer of the cluster."
    return ""


def _ignore_text(_text: str) -> None:
    """The check times the answer; its words do not matter."""
