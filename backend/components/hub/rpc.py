"""JSON-RPC methods of the Hugging Face search (``hub:*``), with their input checks."""

from __future__ import annotations

import re

from backend.components.hub.client import HubClient
from backend.components.hub.suggest import suggest_file
from backend.core.rpc import Dispatcher
from backend.protocol import errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.hub import (
    HUB_LIMIT_MAX,
    HUB_QUERY_MAX_CHARS,
    HubFiles,
    HubModels,
    HubQuery,
    HubRepoQuery,
)

# Hugging Face's rule for an owner and a repository name: letters, digits, '-', '_', '.',
# at most 96 characters, not starting with '-' or '.'.
_REPO = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,95}/[A-Za-z0-9_][A-Za-z0-9._-]{0,95}")


def register(dispatcher: Dispatcher, client: HubClient) -> None:
    """Route ``hub:search`` and ``hub:files`` to Hugging Face through ``client``."""

    async def search(params: HubQuery, _: RpcPeer) -> HubModels:
        query = checked_query(params)
        return HubModels(models=await client.search(query, params.limit))

    async def files(params: HubRepoQuery, _: RpcPeer) -> HubFiles:
        repo = checked_repo(params)
        found = await client.files(repo)
        suggestion = suggest_file(found, params.memory_bytes)
        return HubFiles(repo=repo, files=found, suggested=suggestion.name, reason=suggestion.reason)

    dispatcher.add(methods.HUB_SEARCH, search)
    dispatcher.add(methods.HUB_FILES, files)


def checked_query(params: HubQuery) -> str:
    """The query without surrounding spaces; ``InvalidParams`` for an empty or long one or a
    limit out of range."""
    query = params.query.strip()
    if not query:
        raise errors.InvalidParams("type some words of a model's name to search for")
    if len(query) > HUB_QUERY_MAX_CHARS:
        raise errors.InvalidParams(
            f"the search is {len(query)} characters long; use at most {HUB_QUERY_MAX_CHARS}"
        )
    if not 1 <= params.limit <= HUB_LIMIT_MAX:
        raise errors.InvalidParams(f"ask for 1 to {HUB_LIMIT_MAX} repositories, not {params.limit}")
    return query


def checked_repo(params: HubRepoQuery) -> str:
    """The repository without surrounding spaces; ``InvalidParams`` unless it is
    ``owner/name``, or for a memory size that is not positive."""
    repo = params.repo.strip()
    if not _REPO.fullmatch(repo) or ".." in repo:
        raise errors.InvalidParams(
            f"'{repo}' is not a Hugging Face repository: write it as owner/name, "
            "e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF"
        )
    if params.memory_bytes is not None and params.memory_bytes <= 0:
        raise errors.InvalidParams(f"the memory size must be positive, not {params.memory_bytes}")
    return repo
