"""Helpers for async GUI tests: polling waits, a scripted broker connection, the stores."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtCore import SignalInstance

from app.broker.connection import BrokerConnection
from app.broker.launch import BrokerLaunch
from app.broker.state import Ownership, ServiceState
from app.stores.cluster import ClusterStore
from app.stores.components import ComponentsStore
from app.stores.discovery import DiscoveryStore
from app.stores.engines import EnginesStore
from app.stores.jobs import JobsStore
from backend.protocol import methods
from backend.protocol.contract import Method, Push

P = TypeVar("P")
R = TypeVar("R")


async def wait_until(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    """Let the loop run until ``predicate()`` holds; fail after ``timeout`` seconds.

    Polling (not an event) because the conditions span Qt widgets and broker processes.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if predicate():
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        await asyncio.sleep(0.02)


async def emitted(signal: SignalInstance, action: Callable[[], object]) -> tuple[Any, ...]:
    """Run ``action`` and let the loop run until ``signal`` is emitted; its arguments.

    Not ``qtbot.waitSignal``: its nested Qt loop would not run the asyncio tasks that emit."""
    seen: list[tuple[Any, ...]] = []

    def record(*args: Any) -> None:
        seen.append(args)

    signal.connect(record)
    try:
        action()
        await wait_until(lambda: bool(seen), 5, f"{signal}")
    finally:
        signal.disconnect(record)
    return seen[0]


async def settle() -> None:
    """Let already scheduled callbacks and tasks run."""
    for _ in range(5):
        await asyncio.sleep(0)


class FakeConnection(BrokerConnection):
    """A connection without a broker: scripted call results, pushes emitted by the test.

    ``calls`` records ``(method name, params as on the wire)``; a scripted result is the raw
    JSON value, decoded by the method as the real connection does (an unscripted call answers
    ``null``, which most methods refuse with ``BadResult``).
    """

    def __init__(self) -> None:
        super().__init__(BrokerLaunch(Path("/nonexistent/pair-test")))
        self.calls: list[tuple[str, Any]] = []
        self.results: dict[str, list[Any]] = {}
        self.fake_ownership: Ownership | None = None

    @property
    def ownership(self) -> Ownership | None:
        return self.fake_ownership

    @property
    def pid(self) -> int | None:
        return 4242 if self.fake_ownership is not None else None

    async def call(self, method: Method[P, R], params: P | None = None, timeout: float = 10.0) -> R:
        self.calls.append((method.name, method.encode_params(params)))
        queue = self.results.get(method.name)
        value = queue.pop(0) if queue else None
        if isinstance(value, asyncio.Future):
            value = await value
        if isinstance(value, Exception):
            raise value
        return method.decode_result(value)

    def script(self, method: Method[Any, Any], *results: Any) -> None:
        """Queue raw results for ``method``: a value, an exception to raise, or a future."""
        self.results.setdefault(method.name, []).extend(results)

    def called(self, method: Method[Any, Any]) -> list[Any]:
        """The params of every call of ``method``, in order."""
        return [params for name, params in self.calls if name == method.name]

    def become_ready(self, ownership: Ownership = Ownership.OWNED) -> None:
        """Pretend a session started and is ready."""
        self.fake_ownership = ownership
        self.session_changed.emit()
        self._set_state(ServiceState.READY)
        self.session_ready.emit()

    def lose_session(self, state: ServiceState = ServiceState.DISCONNECTED) -> None:
        """Pretend the session ended."""
        self.fake_ownership = None
        self.session_changed.emit()
        self._set_state(state)

    def push(self, push: Push[Any], params: Any) -> None:
        """Deliver a push (raw params) as the broker would."""
        self.notification_received.emit(push.name, params)


@dataclass
class Stores:
    """One store per numbered stream, as the composition root builds them."""

    discovery: DiscoveryStore
    engines: EnginesStore
    jobs: JobsStore
    components: ComponentsStore
    cluster: ClusterStore

    @classmethod
    def build(cls, connection: BrokerConnection) -> Stores:
        return cls(
            DiscoveryStore(connection),
            EnginesStore(connection),
            JobsStore(connection),
            ComponentsStore(connection),
            ClusterStore(connection),
        )

    async def close(self) -> None:
        for store in (self.discovery, self.engines, self.jobs, self.components, self.cluster):
            await store.close()


NO_MODELS: dict[str, Any] = {
    "models": [], "by_engine": {}, "loaded_by_engine": {}, "slots_by_engine": {},
}  # fmt: skip


class EngineEvents:
    """The ``engine:*`` stream as a test drives it: a snapshot at ``seq``, then numbered
    ``engine:event`` pushes, each one more than the last."""

    def __init__(self, connection: FakeConnection, seq: int = 1) -> None:
        self.connection = connection
        self.seq = seq

    def snapshot(
        self,
        engines: Iterable[dict[str, Any]] = (),
        models: dict[str, Any] | None = None,
        pulls: Iterable[dict[str, Any]] = (),
        installs: Iterable[dict[str, Any]] = (),
        members: Iterable[dict[str, Any]] = (),
        scheduler: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A raw ``engine:subscribe`` answer at the current ``seq`` (``members``: other
        members' ``MemberEngines``; ``scheduler``: this node's ``SchedulerStates``)."""
        return {
            "seq": self.seq, "engines": list(engines), "models": models or NO_MODELS,
            "pulls": list(pulls), "installs": list(installs), "members": list(members),
            **({"scheduler": scheduler} if scheduler is not None else {}),
        }  # fmt: skip

    def script(self, *engines: dict[str, Any], **rest: Any) -> None:
        """Script the next ``engine:subscribe`` answer."""
        self.connection.script(methods.ENGINE_SUBSCRIBE, self.snapshot(engines, **rest))

    def state(self, status: dict[str, Any]) -> None:
        """Push ``state_changed``."""
        self._push("state_changed", status=status)

    def models(self, models: dict[str, Any]) -> None:
        """Push ``models_changed``."""
        self._push("models_changed", models=models)

    def pull(self, progress: dict[str, Any]) -> None:
        """Push ``pull_progressed``."""
        self._push("pull_progressed", progress=progress)

    def install(self, progress: dict[str, Any]) -> None:
        """Push ``install_progressed``."""
        self._push("install_progressed", progress=progress)

    def member(self, member: dict[str, Any]) -> None:
        """Push ``member_changed`` (another member's whole state)."""
        self._push("member_changed", member=member)

    def scheduler(self, states: dict[str, Any]) -> None:
        """Push ``scheduler_changed`` (this node's ``SchedulerStates``)."""
        self._push("scheduler_changed", scheduler=states)

    def member_left(self, node_id: str) -> None:
        """Push ``member_left``."""
        self._push("member_left", node_id=node_id)

    def _push(self, event: str, **payload: Any) -> None:
        self.seq += 1
        self.connection.push(methods.ENGINE_EVENT, {"seq": self.seq, "event": event, **payload})
