"""JSON-RPC methods of the engine manager (``engine:*``)."""

from __future__ import annotations

from typing import Any

from backend.components.engines.component import EnginesComponent
from backend.core.rpc import Dispatcher
from backend.protocol import methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types import (
    EngineActionParams,
    EngineLogs,
    EngineModels,
    EngineQuery,
    EngineRef,
    EngineSetPort,
    EngineStatus,
)


def register(dispatcher: Dispatcher, engines: EnginesComponent) -> None:
    """Route ``engine:*``."""

    async def get_installed(_: RpcPeer) -> list[EngineStatus]:
        for controller in engines.controllers.values():
            await controller.detect()
        return [status for status in engines.statuses() if status.installed]

    async def status(params: EngineQuery, _: RpcPeer) -> EngineStatus | list[EngineStatus]:
        if params.engine is not None:
            return engines.controller(params.engine).status()
        return engines.statuses()

    async def start(params: EngineRef, _: RpcPeer) -> EngineStatus:
        return await engines.controller(params.engine).start()

    async def stop(params: EngineRef, _: RpcPeer) -> EngineStatus:
        return await engines.controller(params.engine).stop()

    async def restart(params: EngineRef, _: RpcPeer) -> EngineStatus:
        return await engines.controller(params.engine).restart()

    async def install(params: EngineRef, _: RpcPeer) -> EngineStatus:
        controller = engines.controller(params.engine)
        return await controller.install(engines.on_install_progress)

    async def uninstall(params: EngineRef, _: RpcPeer) -> EngineStatus:
        return await engines.controller(params.engine).uninstall()

    async def set_port(params: EngineSetPort, _: RpcPeer) -> EngineStatus:
        return await engines.set_port(params.engine, params.port)

    async def action(params: EngineActionParams, _: RpcPeer) -> Any:
        return await engines.run_action(params.engine, params.action, params.model)

    async def models(_: RpcPeer) -> EngineModels:
        return await engines.models()

    async def logs(params: EngineQuery, _: RpcPeer) -> EngineLogs:
        controller = engines.controller(params.engine or "")
        return EngineLogs(engine=controller.name, lines=controller.output.tail(params.lines))

    async def prepare_shutdown(_: RpcPeer) -> dict[str, bool]:
        await engines.prepare_shutdown()
        return {"ok": True}

    dispatcher.add_plain(methods.ENGINE_GET_INSTALLED, get_installed)
    dispatcher.add(methods.ENGINE_STATUS, status, EngineQuery)
    dispatcher.add(methods.ENGINE_START, start, EngineRef)
    dispatcher.add(methods.ENGINE_STOP, stop, EngineRef)
    dispatcher.add(methods.ENGINE_RESTART, restart, EngineRef)
    dispatcher.add(methods.ENGINE_INSTALL, install, EngineRef)
    dispatcher.add(methods.ENGINE_UNINSTALL, uninstall, EngineRef)
    dispatcher.add(methods.ENGINE_SET_PORT, set_port, EngineSetPort)
    dispatcher.add(methods.ENGINE_ACTION, action, EngineActionParams)
    dispatcher.add_plain(methods.ENGINE_MODELS, models)
    dispatcher.add(methods.ENGINE_LOGS, logs, EngineQuery)
    dispatcher.add_plain(methods.ENGINE_PREPARE_SHUTDOWN, prepare_shutdown)
