"""The GUI's link to its node's broker: attach or spawn, supervise, and expose the state.

States (``ServiceState``): ``connecting`` while attaching or starting (until ``app:ready``, or
until ``ping`` answers when attaching), ``ready``, ``disconnected`` when a broker this app did
not start (or one someone else told to stop) went away, ``failed`` when a broker this app owns
crashed more often than ``RestartPolicy`` allows or could not be started at all.

Policy: at launch, attach to the broker already running for the data dir, else spawn one
(its stdio is the RPC channel; exit code 3 means another broker won the race: attach to it).
A crashed owned broker is restarted within the budget. While ``disconnected`` or ``failed``
the app only tries to attach every few seconds, so a broker restarted by a system service, a
terminal or another window is picked up, but it never starts one the user did not ask for:
the Start command does that.
"""

from __future__ import annotations

import asyncio
import logging
from enum import StrEnum
from typing import Any, TypeVar

from PySide6.QtCore import QObject, Signal

from app.broker.launch import BrokerLaunch
from app.broker.process import OwnedBroker
from app.broker.restart_policy import RestartPolicy
from app.broker.session import STARTUP_TIMEOUT_S, BrokerSession
from app.broker.state import Ending, Ownership, ServiceState
from backend.common.tasks import TaskSet, wait_first
from backend.protocol import methods
from backend.protocol.contract import Method
from backend.protocol.errors import ConnectionLost

log = logging.getLogger(__name__)
P = TypeVar("P")
R = TypeVar("R")

RETRY_INTERVAL_S = 3.0
RESTART_DELAY_S = 0.5


class Command(StrEnum):
    """What the user asked the connection to do."""

    START = "start"  # from failed or disconnected: attach, else spawn a broker we own
    RESTART = "restart"  # owned: stop and spawn again; attached: reconnect


class BrokerConnection(QObject):
    """Supervises the link to the broker. Owns the supervisor task and the current session."""

    state_changed = Signal(object)  # ServiceState
    session_changed = Signal()  # ownership or pid changed, or the session ended
    session_ready = Signal()  # a new session is ready: re-read every snapshot
    notification_received = Signal(str, object)  # push method, raw params

    def __init__(
        self,
        launch: BrokerLaunch,
        policy: RestartPolicy | None = None,
        *,
        retry_interval: float = RETRY_INTERVAL_S,
        restart_delay: float = RESTART_DELAY_S,
        startup_timeout: float = STARTUP_TIMEOUT_S,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._launch = launch
        self._policy = policy if policy is not None else RestartPolicy()
        self._retry_interval = retry_interval
        self._restart_delay = restart_delay
        self._startup_timeout = startup_timeout
        self._state = ServiceState.CONNECTING
        self._session: BrokerSession | None = None
        self._failure = ""
        self._command: Command | None = None
        self._wake = asyncio.Event()
        self._tasks = TaskSet("broker-connection")
        self._supervisor: asyncio.Task[None] | None = None

    @property
    def state(self) -> ServiceState:
        """The current state."""
        return self._state

    @property
    def ownership(self) -> Ownership | None:
        """Owned or attached while a session exists, else None."""
        return self._session.ownership if self._session is not None else None

    @property
    def pid(self) -> int | None:
        """The broker's PID when known (at once for an owned one, from ``app:ready`` else)."""
        return self._session.pid if self._session is not None else None

    @property
    def failure_message(self) -> str:
        """Why the broker failed or stopped, from its last stderr line; empty when unknown."""
        return self._failure

    def start(self) -> None:
        """Begin supervising (with the event loop running); again after an internal error."""
        if self._supervisor is None or self._supervisor.done():
            self._supervisor = self._tasks.spawn(self._supervise(), name="supervise")

    async def stop(self) -> None:
        """Stop supervising; shut down a broker this app owns, leave an attached one running."""
        await self._tasks.close(timeout=3.0)
        session = self._session
        if session is not None:
            self._drop(session)
            await session.close()
        self._set_state(ServiceState.DISCONNECTED)

    def request_start(self) -> None:
        """Start (or attach to) a broker now; meaningful when failed or disconnected."""
        self._request(Command.START)
        if self._supervisor is not None and self._supervisor.done():
            self.start()

    def request_restart(self) -> None:
        """Owned: stop the broker and spawn a new one. Attached: reconnect to it."""
        self._request(Command.RESTART)

    async def call(self, method: Method[P, R], params: P | None = None, timeout: float = 10.0) -> R:
        """One typed RPC to the broker: ``params`` encoded and the result decoded by ``method``.

        Raises ``ConnectionLost`` when there is no session, ``BadResult`` (an ``RpcError``) when
        the answer has another shape than the contract declares.
        """
        session = self._session
        if session is None or session.closing:
            raise ConnectionLost("not connected to the PAIR service")
        return await session.call(method, params, timeout)

    def _request(self, command: Command) -> None:
        self._command = command
        self._wake.set()

    def _take_command(self) -> Command | None:
        command, self._command = self._command, None
        self._wake.clear()
        return command

    def _set_state(self, state: ServiceState) -> None:
        if state != self._state:
            log.info("service state: %s -> %s", self._state, state)
            self._state = state
            self.state_changed.emit(state)

    async def _supervise(self) -> None:
        try:
            await self._supervise_forever()
        except Exception as exc:
            # A bug here must not leave the window saying "connecting" forever.
            log.exception("broker supervision failed")
            self._failure = f"Internal error while supervising the service: {exc}"
            self._set_state(ServiceState.FAILED)

    async def _supervise_forever(self) -> None:
        may_spawn = True
        while True:
            if may_spawn:
                self._set_state(ServiceState.CONNECTING)
            session = await self._attach()
            if session is None and may_spawn:
                session = await self._spawn()
            if session is None:
                may_spawn = await self._wait_for_start()
                continue
            ending = await self._serve(session)
            may_spawn = await self._recover(session, ending)

    async def _attach(self) -> BrokerSession | None:
        """Attach to the broker already running for the data dir, if one answers."""
        try:
            address = self._launch.control_address
        except OSError as exc:  # the runtime dir is unusable; a spawned broker will say why
            log.warning("no control address: %s", exc)
            return None
        session = await BrokerSession.attach(address, self._on_session_push)
        if session is not None:
            self._adopt(session)
            self._announce_ready(session)
        return session

    async def _spawn(self) -> BrokerSession | None:
        """Start a broker this app owns; None (and failed) when it cannot even be started."""
        try:
            process = await OwnedBroker.spawn(self._launch)
        except OSError as exc:
            log.error("could not start the broker: %s", exc)
            self._failure = f"Could not start the service: {exc}"
            self._set_state(ServiceState.FAILED)
            return None
        session = BrokerSession.over_process(process, self._on_session_push, self._startup_timeout)
        self._adopt(session)
        return session

    async def _serve(self, session: BrokerSession) -> Ending:
        """Wait until the session ends by itself, or until a restart command closes it."""
        while True:
            ended = session.wait_ended()
            if await wait_first(ended, self._wake.wait()) == 0:
                return session.ending
            if self._take_command() is Command.RESTART:
                self._set_state(ServiceState.CONNECTING)
                await session.close()
                return Ending.CLOSED

    async def _recover(self, session: BrokerSession, ending: Ending) -> bool:
        """Decide what follows a session's end; True when the next attempt may spawn."""
        self._drop(session)
        await session.close()
        if ending is Ending.CLOSED:
            return True
        if ending in (Ending.CRASHED, Ending.ALREADY_RUNNING):
            self._failure = session.describe_end()
            if self._policy.record_crash():
                self._set_state(ServiceState.CONNECTING)
                await asyncio.sleep(self._restart_delay)
                return True
            self._set_state(ServiceState.FAILED)
        else:
            self._failure = (
                "The service this app was attached to went away."
                if ending is Ending.LOST
                else "The service was asked to stop by another program."
            )
            self._set_state(ServiceState.DISCONNECTED)
        return await self._wait_for_start()

    async def _wait_for_start(self) -> bool:
        """Idle until Start (True) or until it is time for another attach attempt (False)."""
        try:
            async with asyncio.timeout(self._retry_interval):
                await self._wake.wait()
        except TimeoutError:
            return False
        self._take_command()
        self._policy.reset()
        return True

    def _adopt(self, session: BrokerSession) -> None:
        self._session = session
        self.session_changed.emit()

    def _drop(self, session: BrokerSession) -> None:
        if self._session is session:
            self._session = None
            self.session_changed.emit()

    def _announce_ready(self, session: BrokerSession) -> None:
        if session.announced_ready:
            return
        session.announced_ready = True
        self._failure = ""
        self._set_state(ServiceState.READY)
        self.session_ready.emit()

    def _on_session_push(self, session: BrokerSession, method: str, params: Any) -> None:
        if session is not self._session:
            return
        if method == methods.APP_READY.name:
            self.session_changed.emit()  # the session now knows the broker's PID
            self._announce_ready(session)
        self.notification_received.emit(method, params)
