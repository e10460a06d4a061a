"""JSON-RPC methods of the engine manager (``engine:*``)."""

from __future__ import annotations

from backend.components.engines import replica_actions
from backend.components.engines.component import EnginesComponent
from backend.core.rpc import Dispatcher, NumberedStream
from backend.protocol import methods
from backend.protocol.contract import NoParams
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import NodeId
from backend.protocol.types.engines import (
    EngineActionParams,
    EngineActionResult,
    EngineEvent,
    EngineLogs,
    EngineLogsQuery,
    EngineModels,
    EngineRef,
    EngineSetPort,
    EnginesSnapshot,
    EngineStatus,
    EngineVersions,
    NodeScope,
)
from backend.protocol.types.results import Ok, Unsubscribed


def register(
    dispatcher: Dispatcher, engines: EnginesComponent, events: NumberedStream[EngineEvent]
) -> None:
    """Route ``engine:*``."""

    async def get_installed(_: NodeScope, __: RpcPeer) -> list[EngineStatus]:
        for controller in engines.controllers.values():
            await controller.detect()
        return [status for status in engines.statuses() if status.installed]

    async def list_all(_: NodeScope, __: RpcPeer) -> list[EngineStatus]:
        return engines.statuses()

    async def status(params: EngineRef, _: RpcPeer) -> EngineStatus:
        return engines.controller(params.engine).status()

    async def subscribe(_: NoParams, peer: RpcPeer) -> EnginesSnapshot:
        return engines.snapshot(events.subscribe(peer))

    async def unsubscribe(_: NoParams, peer: RpcPeer) -> Unsubscribed:
        events.unsubscribe(peer)
        return Unsubscribed()

    async def start(params: EngineRef, _: RpcPeer) -> EngineStatus:
        return await engines.controller(params.engine).start()

    async def stop(params: EngineRef, _: RpcPeer) -> EngineStatus:
        return await engines.controller(params.engine).stop()

    async def restart(params: EngineRef, _: RpcPeer) -> EngineStatus:
        return await engines.restart(params.engine)

    async def install(params: EngineRef, _: RpcPeer) -> EngineStatus:
        controller = engines.controller(params.engine)
        return await controller.install_and_start(engines.on_install_progress)

    async def uninstall(params: EngineRef, _: RpcPeer) -> EngineStatus:
        return await engines.controller(params.engine).uninstall()

    async def versions(params: EngineRef, _: RpcPeer) -> EngineVersions:
        return await engines.controller(params.engine).versions()

    async def update(params: EngineRef, _: RpcPeer) -> EngineStatus:
        return await engines.update(params.engine)

    async def set_port(params: EngineSetPort, _: RpcPeer) -> EngineStatus:
        return await engines.set_port(params.engine, params.port)

    async def action(params: EngineActionParams, peer: RpcPeer) -> EngineActionResult:
        return await replica_actions.run_marked_action(engines, params, by=_calling_node(peer))

    async def models(_: NodeScope, __: RpcPeer) -> EngineModels:
        return await engines.models()

    async def logs(params: EngineLogsQuery, _: RpcPeer) -> EngineLogs:
        controller = engines.controller(params.engine)
        return EngineLogs(engine=controller.name, lines=controller.output.tail(params.lines))

    async def prepare_shutdown(_: NoParams, __: RpcPeer) -> Ok:
        await engines.prepare_shutdown()
        return Ok()

    dispatcher.add(methods.ENGINE_GET_INSTALLED, get_installed)
    dispatcher.add(methods.ENGINE_LIST, list_all)
    dispatcher.add(methods.ENGINE_STATUS, status)
    dispatcher.add(methods.ENGINE_SUBSCRIBE, subscribe)
    dispatcher.add(methods.ENGINE_UNSUBSCRIBE, unsubscribe)
    dispatcher.add(methods.ENGINE_START, start)
    dispatcher.add(methods.ENGINE_STOP, stop)
    dispatcher.add(methods.ENGINE_RESTART, restart)
    dispatcher.add(methods.ENGINE_INSTALL, install)
    dispatcher.add(methods.ENGINE_UNINSTALL, uninstall)
    dispatcher.add(methods.ENGINE_VERSIONS, versions)
    dispatcher.add(methods.ENGINE_UPDATE, update)
    dispatcher.add(methods.ENGINE_SET_PORT, set_port)
    dispatcher.add(methods.ENGINE_ACTION, action)
    dispatcher.add(methods.ENGINE_MODELS, models)
    dispatcher.add(methods.ENGINE_LOGS, logs)
    dispatcher.add(methods.ENGINE_PREPARE_SHUTDOWN, prepare_shutdown)


def _calling_node(peer: RpcPeer) -> NodeId | None:
    """The member whose link the call came over, where the link says (``node_id``)."""
    node = peer.context.get("node_id")
    return NodeId(node) if isinstance(node, str) else None
