"""JSON-RPC methods of the model aliases (``models:aliases``, ``models:alias-set``,
``models:alias-remove``)."""

from __future__ import annotations

from backend.components.aliases.service import AliasesService
from backend.core.rpc import Dispatcher
from backend.protocol import methods
from backend.protocol.contract import NoParams
from backend.protocol.peer import RpcPeer
from backend.protocol.types.aliases import AliasRef, AliasSet, ModelAlias


def register(dispatcher: Dispatcher, service: AliasesService) -> None:
    """Route the three alias methods to ``service``."""

    async def list_aliases(_: NoParams, __: RpcPeer) -> list[ModelAlias]:
        return await service.list_aliases()

    async def set_alias(params: AliasSet, _: RpcPeer) -> ModelAlias:
        return await service.set_alias(params.name, params.target)

    async def remove_alias(params: AliasRef, _: RpcPeer) -> ModelAlias:
        return await service.remove_alias(params.name)

    dispatcher.add(methods.MODELS_ALIASES, list_aliases)
    dispatcher.add(methods.MODELS_ALIAS_SET, set_alias)
    dispatcher.add(methods.MODELS_ALIAS_REMOVE, remove_alias)
