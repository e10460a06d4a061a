"""``pair models``, ``pair model pull ENGINE NAME|URL`` (also ``pair pull``, and ``--engine``
as before), ``pair model search QUERY`` and ``pair model files OWNER/NAME``: the models of a
node's engines, pulling one, and finding GGUF models on Hugging Face for llama.cpp."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec

from backend.cli import exit_codes
from backend.cli.engine_format import model_rows, models_table
from backend.cli.hub_format import describe_files, describe_search
from backend.cli.node_ref import KnownNode, node_id_of, on_node
from backend.cli.progress_bar import ProgressBar
from backend.protocol import contract, errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineActionParams, NodeScope, SpreadStatus
from backend.protocol.types.hub import HUB_LIMIT_MAX, HubQuery, HubRepoQuery

T = TypeVar("T")
URL_SCHEMES = ("http://", "https://")
PULL_SYNTAX = "pair model pull ENGINE NAME|URL"
LIST_TIMEOUT_S = 45.0
HUB_TIMEOUT_S = 30.0  # above the broker's own 20 s for Hugging Face, so its error arrives first
HUB_OPERATIONS = ("search", "files")


def configure_pull(pull: argparse.ArgumentParser) -> None:
    """The arguments of ``pair model pull`` and ``pair pull``: ENGINE NAME|URL, positional;
    ``--engine ENGINE NAME|URL`` is still understood."""
    pull.add_argument(
        "words",
        metavar="ENGINE NAME|URL",
        nargs="*",
        help="the engine, then the model's name or the URL of its file (llama.cpp)",
    )
    pull.add_argument("--engine", metavar="ENGINE", help=argparse.SUPPRESS)
    pull.add_argument("--url", metavar="URL", help="where to download the model file (llama.cpp)")
    pull.add_argument("--sha256", metavar="HEX", help="the SHA-256 the downloaded file must have")


def add_hub_parsers(model_ops: Any) -> list[argparse.ArgumentParser]:
    """``pair model search`` and ``pair model files``; returns them for the common options."""
    search: argparse.ArgumentParser = model_ops.add_parser(
        "search", help="find GGUF models on Hugging Face by name (for llama.cpp)"
    )
    search.add_argument("query", metavar="QUERY", nargs="+", help="words of the model's name")
    search.add_argument(
        "--limit", type=_limit, default=20, help=f"at most this many (1-{HUB_LIMIT_MAX})"
    )
    files: argparse.ArgumentParser = model_ops.add_parser(
        "files", help="a Hugging Face repository's GGUF files, and the one that fits here"
    )
    files.add_argument("repo", metavar="OWNER/NAME", help="the repository, e.g. Qwen/Qwen2.5-…")
    files.add_argument(
        "--memory", type=_gigabytes, metavar="GB", help="suggest for this much memory instead"
    )
    return [search, files]


def _limit(text: str) -> int:
    value = int(text)
    if not 1 <= value <= HUB_LIMIT_MAX:
        raise argparse.ArgumentTypeError(f"give 1 to {HUB_LIMIT_MAX}")
    return value


def _gigabytes(text: str) -> int:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("give a positive number of GB")
    return int(value * 1e9)


def pull_request(args: argparse.Namespace) -> EngineActionParams:
    """What a pull asks for, from ENGINE NAME|URL or ``--engine``; ``InvalidParams`` naming
    the one syntax when something is missing or left over."""
    words: list[str] = list(args.words)
    engine: str | None = args.engine
    if engine is None and words:
        engine = words.pop(0)
    if engine is None or len(words) > 1 or (not words and args.url is None):
        raise errors.InvalidParams(
            f"give the engine and the model's name or the URL of its file: `{PULL_SYNTAX}`"
        )
    return EngineActionParams(
        engine=EngineName(engine),
        action="pull_model",
        model=words[0] if words else None,
        url=args.url,
        sha256=args.sha256,
    )


def pulled_name(model: str | None, url: str | None) -> str:
    """The name a pull saves the model under: ``model``, else the one its URL suggests."""
    if model and not (url is None and model.startswith(URL_SCHEMES)):
        return model
    from backend.components.engines.model_store import name_from_url

    return name_from_url(url or model or "")


def pull_work(
    args: argparse.Namespace,
) -> tuple[ProgressBar, Callable[[RpcPeer, KnownNode | None], Awaitable[int]]] | int:
    """The bar and the work of a pull, or the exit code of a usage error (said on stderr)."""
    try:
        params = pull_request(args)
        name = pulled_name(params.model, params.url)
    except errors.InvalidParams as exc:
        print(f"pair: {exc.message}", file=sys.stderr)
        return exit_codes.USAGE
    bar = ProgressBar(params.engine, name)
    return bar, lambda peer, member: pull(peer, bar, member, params)


async def pull(
    peer: RpcPeer, bar: ProgressBar, member: KnownNode | None, asked: EngineActionParams
) -> int:
    """Pull ``asked`` on ``member``, drawing its progress; says the name to use the model by."""
    params = msgspec.structs.replace(asked, node=node_id_of(member))
    await following(
        peer, bar, member, lambda: contract.call(peer, methods.ENGINE_ACTION, params, timeout=None)
    )
    print(f"{bar.model} is ready in {bar.engine}{on_node(member)}")
    return exit_codes.OK


async def following(
    peer: RpcPeer, bar: ProgressBar, member: KnownNode | None, call: Callable[[], Awaitable[T]]
) -> T:
    """``call``'s answer, with the progress the engine stream tells meanwhile drawn on ``bar``."""
    bar.node = node_id_of(member)  # before subscribing: progress arrives as engine events
    await contract.call(peer, methods.ENGINE_SUBSCRIBE)
    try:
        return await call()
    finally:
        bar.end_line()


async def list_models(peer: RpcPeer, member: KnownNode | None) -> int:
    """``pair models``: a table of the running engines' models on ``member`` (or here)."""
    scope = NodeScope(node=node_id_of(member))
    models = await contract.call(peer, methods.ENGINE_MODELS, scope, timeout=LIST_TIMEOUT_S)
    if not models.by_engine:
        print(f"no engine is running{on_node(member)}")
        return exit_codes.OK
    computer = member.name if member is not None else "this computer"
    print(models_table(model_rows(models, computer), await _spreads(peer, scope)))
    return exit_codes.OK


async def _spreads(peer: RpcPeer, scope: NodeScope) -> dict[str, SpreadStatus]:
    """The models the node's engines run spread over members, by engine (the engine list
    says; the model list does not)."""
    statuses = await contract.call(peer, methods.ENGINE_LIST, scope, timeout=LIST_TIMEOUT_S)
    return {status.engine: status.spread for status in statuses if status.spread is not None}


def hub_work(args: argparse.Namespace) -> Callable[[RpcPeer], Awaitable[int]]:
    """The work of ``pair model search`` or ``pair model files``."""
    if args.operation == "search":
        query = HubQuery(query=" ".join(args.query), limit=args.limit)
        return lambda peer: _search(peer, query)
    memory: int | None = args.memory
    return lambda peer: _files(peer, args.repo, memory)


async def _search(peer: RpcPeer, query: HubQuery) -> int:
    found = await contract.call(peer, methods.HUB_SEARCH, query, timeout=HUB_TIMEOUT_S)
    print(describe_search(query.query, found.models))
    return exit_codes.OK


async def _files(peer: RpcPeer, repo: str, memory: int | None) -> int:
    if memory is None:
        info = await contract.call(peer, methods.NODEINFO_GET, timeout=LIST_TIMEOUT_S)
        memory = info.memory.total_bytes
    query = HubRepoQuery(repo=repo, memory_bytes=memory)
    answer = await contract.call(peer, methods.HUB_FILES, query, timeout=HUB_TIMEOUT_S)
    print(describe_files(answer, memory))
    return exit_codes.OK
