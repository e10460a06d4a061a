"""JSON-RPC methods of the errors registry."""

from __future__ import annotations

from backend.components.errors.registry import ErrorsRegistry
from backend.core.rpc import Dispatcher
from backend.protocol import methods
from backend.protocol.contract import NoParams
from backend.protocol.peer import RpcPeer
from backend.protocol.types.broker import ErrorClear, ErrorReport, ServiceError


def register(dispatcher: Dispatcher, registry: ErrorsRegistry) -> None:
    """Route ``errors:*``."""

    async def get_initial(_: NoParams, __: RpcPeer) -> list[ServiceError]:
        return registry.snapshot()

    async def report(params: ErrorReport, _: RpcPeer) -> None:
        registry.report(params)

    async def clear(params: ErrorClear, _: RpcPeer) -> None:
        registry.clear(params)

    dispatcher.add(methods.ERRORS_GET_INITIAL, get_initial)
    dispatcher.add(methods.ERRORS_REPORT, report)
    dispatcher.add(methods.ERRORS_CLEAR, clear)
