"""JSON-RPC methods of the LAN API keys (``apikeys:*``)."""

from __future__ import annotations

from backend.components.apikeys.service import ApiKeysService
from backend.core.rpc import Dispatcher
from backend.protocol import methods
from backend.protocol.contract import NoParams
from backend.protocol.peer import RpcPeer
from backend.protocol.types.apikeys import ApiKeyCreate, ApiKeyCreated, ApiKeyInfo, ApiKeyRef


def register(dispatcher: Dispatcher, service: ApiKeysService) -> None:
    """Route ``apikeys:create``, ``apikeys:list`` and ``apikeys:revoke``."""

    async def create(params: ApiKeyCreate, _: RpcPeer) -> ApiKeyCreated:
        return await service.create(params.name, params.scope)

    async def list_keys(_: NoParams, __: RpcPeer) -> list[ApiKeyInfo]:
        return await service.list_keys()

    async def revoke(params: ApiKeyRef, _: RpcPeer) -> ApiKeyInfo:
        return await service.revoke(params.id)

    dispatcher.add(methods.APIKEYS_CREATE, create)
    dispatcher.add(methods.APIKEYS_LIST, list_keys)
    dispatcher.add(methods.APIKEYS_REVOKE, revoke)
