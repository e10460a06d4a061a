"""Engine commands and reads as operations, in the manner of Anki's ``CollectionOp``: each one
makes its RPC and reports the outcome (success, or the broker's message) to the callbacks it is
given. None of them keeps what the Engines page shows; ``EngineDisplay`` does."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec

from app.broker.connection import BrokerConnection
from app.models.engines import EngineCommand, EngineKey, door_ports
from app.pending import BACKEND, call_timeout, pending_timeout
from backend.common.tasks import TaskSet
from backend.protocol import methods
from backend.protocol.contract import Method
from backend.protocol.errors import RpcError
from backend.protocol.types.base import NodeId
from backend.protocol.types.engines import (
    EngineLogsQuery,
    EngineRef,
    EngineSetPort,
    EngineStatus,
    EngineVersions,
)

log = logging.getLogger(__name__)

LOG_LINES = 500
# The commands' own answers come when the work is done: a start waits until the engine is
# ready, an install or update until the download is unpacked and the engine started again.
COMMAND_CALL_TIMEOUT_S = call_timeout(BACKEND.engine_restart)
INSTALL_CALL_TIMEOUT_S = 3600.0
# How long each command's pending mark waits for the backend's truth; for an install or an
# update, how long it waits without a sign of progress (the last step restarts the engine).
PENDING_TIMEOUTS_S: dict[EngineCommand, float] = {
    EngineCommand.START: pending_timeout(BACKEND.engine_start),
    EngineCommand.STOP: pending_timeout(BACKEND.engine_stop),
    EngineCommand.RESTART: pending_timeout(BACKEND.engine_restart),
    EngineCommand.SET_PORT: pending_timeout(BACKEND.engine_restart),
    EngineCommand.INSTALL: pending_timeout(BACKEND.engine_restart),
    EngineCommand.UPDATE: pending_timeout(BACKEND.engine_restart),
}
VERSIONS_CALL_TIMEOUT_S = 40.0  # the broker asks the release feed with a 10 s bound
WITH_PROGRESS = (EngineCommand.INSTALL, EngineCommand.UPDATE)

_METHODS: dict[EngineCommand, Method[EngineRef, EngineStatus]] = {
    EngineCommand.START: methods.ENGINE_START,
    EngineCommand.STOP: methods.ENGINE_STOP,
    EngineCommand.RESTART: methods.ENGINE_RESTART,
    EngineCommand.INSTALL: methods.ENGINE_INSTALL,
    EngineCommand.UPDATE: methods.ENGINE_UPDATE,
}


class EngineOp(msgspec.Struct, frozen=True):
    """One command for one engine of one node: ``wire_node`` is None for this node, ``port``
    the target of a ``SET_PORT``. ``run_in_background`` sends it and calls ``success`` once
    the broker answers (the state it led to arrives as engine events first) or ``failure``
    with the broker's message."""

    key: EngineKey
    command: EngineCommand
    wire_node: NodeId | None
    port: int | None = None

    def run_in_background(
        self,
        tasks: TaskSet,
        connection: BrokerConnection,
        *,
        success: Callable[[], None],
        failure: Callable[[str], None],
    ) -> None:
        """Send the command in a task of ``tasks``; the outcome goes to one of the callbacks."""
        name = f"{self.command} {self.key[1]} {self.key[0]}"
        tasks.spawn(self._run(connection, success, failure), name=name)

    async def _run(
        self,
        connection: BrokerConnection,
        success: Callable[[], None],
        failure: Callable[[str], None],
    ) -> None:
        try:
            await self._call(connection)
        except RpcError as exc:
            log.info("engine %s %s on %s failed: %s", self.key[1], self.command, self.key[0], exc)
            failure(exc.message)
            return
        success()

    def _call(self, connection: BrokerConnection) -> Coroutine[Any, Any, EngineStatus]:
        engine = self.key[1]
        long_running = self.command in WITH_PROGRESS
        timeout = INSTALL_CALL_TIMEOUT_S if long_running else COMMAND_CALL_TIMEOUT_S
        if self.command is EngineCommand.SET_PORT and self.port is not None:
            params = EngineSetPort(engine=engine, port=self.port, node=self.wire_node)
            return connection.call(methods.ENGINE_SET_PORT, params, timeout)
        ref = EngineRef(engine=engine, node=self.wire_node)
        return connection.call(_METHODS[self.command], ref, timeout)


async def read_versions(
    connection: BrokerConnection, key: EngineKey, wire_node: NodeId | None
) -> EngineVersions | None:
    """The engine's installed and latest versions; None (logged) when the call failed."""
    ref = EngineRef(engine=key[1], node=wire_node)
    try:
        return await connection.call(methods.ENGINE_VERSIONS, ref, VERSIONS_CALL_TIMEOUT_S)
    except RpcError as exc:
        log.info("engine:versions of %s on %s failed: %s", key[1], key[0], exc)
        return None


async def read_logs(
    connection: BrokerConnection, key: EngineKey, wire_node: NodeId | None
) -> list[str]:
    """The engine's last ``LOG_LINES`` lines of output; raises the broker's ``RpcError``."""
    query = EngineLogsQuery(engine=key[1], lines=LOG_LINES, node=wire_node)
    logs = await connection.call(methods.ENGINE_LOGS, query)
    return logs.lines


async def read_doors(connection: BrokerConnection) -> dict[str, int] | None:
    """This node's front doors' ports from ``status``; None (logged) when the call failed."""
    try:
        broker = await connection.call(methods.STATUS)
    except RpcError as exc:
        log.info("status failed: %s", exc)
        return None
    return door_ports(broker.front_doors)


async def detect_installed(connection: BrokerConnection) -> None:
    """Run detection again, so an engine installed outside PAIR since the broker started shows
    as installed (the change arrives as an engine event); a failure is only logged."""
    try:
        await connection.call(methods.ENGINE_GET_INSTALLED)
    except RpcError as exc:
        log.info("engine:get-installed failed: %s", exc)
