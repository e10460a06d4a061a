"""Asking an address what runs there: PAIR's node-info, or a bare engine's own endpoints.

Answers are untrusted: bodies over ``MAX_BODY_BYTES``, wrong types and a different node's UUID
are refused with ``ProbeFailed`` (the caller logs it; ``NotReached`` when nothing answered at
all); nothing here raises anything else.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp
import msgspec

from backend.common import tls
from backend.common.hostport import url_host
from backend.core.plain_errors import plain_error
from backend.protocol.types.nodes import NodeEngineModels, NodeInfo

NODE_INFO_PATH = "/v1/node-info"
MAX_BODY_BYTES = 1024 * 1024
CONNECT_TIMEOUT_S = 1.0
READ_TIMEOUT_S = 3.0
# Each bare engine's identifying endpoint, in the order they are told apart.
ENGINE_PATHS = (
    "/api/version",
    "/api/tags",
    "/api/ps",
    "/lmstudio-greeting",
    "/health",
    "/v1/models",
)


class ProbeFailed(Exception):
    """The address did not answer usefully; the message says why."""


class NotReached(ProbeFailed):
    """Nothing answered at the address: the connection was refused or unroutable, or it timed
    out (as against an answer that was refused: a failed handshake, a bad status or body)."""


class EngineAnswer(msgspec.Struct, frozen=True):
    """A bare engine found at an address."""

    engine: str
    models: NodeEngineModels


# A PAIR node API speaks TLS; node-info's public part needs no checked certificate (a node's
# identity is what a pinned handshake proves, never what discovery reads anonymously). A member
# is asked over mutual TLS instead (the caller's context), which alone brings its inventories.
_PUBLIC_TLS = tls.unverified_client_context(None)


async def get_json(
    session: aiohttp.ClientSession,
    address: str,
    port: int,
    path: str,
    timeout: float,
    *,
    secure: bool = False,
    tls_context: ssl.SSLContext | None = None,
) -> Any:
    """GET a JSON document of at most ``MAX_BODY_BYTES`` (over TLS when ``secure``: a PAIR node
    API, anonymously unless ``tls_context`` is given; plain HTTP: a bare engine); raises
    ``ProbeFailed``."""
    scheme = "https" if secure else "http"
    url = f"{scheme}://{url_host(address)}:{port}{path}"
    limits = aiohttp.ClientTimeout(total=timeout, sock_connect=min(CONNECT_TIMEOUT_S, timeout))
    context = (tls_context or _PUBLIC_TLS) if secure else None
    try:
        async with session.get(
            url, timeout=limits, allow_redirects=False, ssl=context or True
        ) as response:
            if response.status != 200:
                raise ProbeFailed(f"{url} answered {response.status}")
            body = await _read_bounded(response)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        failure = NotReached if _not_reached(exc) else ProbeFailed
        raise failure(plain_error(exc, url)) from None
    return parse_json(url, body)


def parse_json(url: str, body: bytes) -> Any:
    """The JSON document ``url`` answered; ``ProbeFailed`` for anything else, also for nesting
    too deep to decode and for strings no encoder could write again (a lone surrogate)."""
    try:
        return msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):
        raise ProbeFailed(f"{url} did not answer JSON") from None


async def fetch_node_info(
    session: aiohttp.ClientSession,
    address: str,
    port: int,
    *,
    expected_id: str | None = None,
    timeout: float = READ_TIMEOUT_S,
    tls_context: ssl.SSLContext | None = None,
) -> NodeInfo:
    """The node-info of the PAIR node at ``address``; a different ``node_id`` is refused.

    Over ``tls_context`` (mutual TLS to a member) when given, else anonymously.
    """
    document = await get_json(
        session, address, port, NODE_INFO_PATH, timeout, secure=True, tls_context=tls_context
    )
    return node_info_of(f"{url_host(address)}:{port}", document, expected_id)


def node_info_of(where: str, document: Any, expected_id: str | None = None) -> NodeInfo:
    """``document`` (from ``parse_json``) as the node-info of ``where``; ``ProbeFailed`` when it
    is not one, or is another node's."""
    try:
        info = msgspec.convert(document, NodeInfo)
    except (msgspec.ValidationError, RecursionError) as exc:
        raise ProbeFailed(f"{where} sent a malformed node-info: {exc}") from None
    if expected_id is not None and info.node_id != expected_id:
        raise ProbeFailed(f"{where} answers as node {info.node_id}, not {expected_id}")
    return info


async def probe_engine(
    session: aiohttp.ClientSession, address: str, port: int, *, timeout: float = READ_TIMEOUT_S
) -> EngineAnswer:
    """Which bare engine answers at ``address:port``, with its models; raises ``ProbeFailed``."""

    async def one(path: str) -> Any:
        try:
            return await get_json(session, address, port, path, timeout)
        except ProbeFailed:
            return None

    answers = await asyncio.gather(*(one(path) for path in ENGINE_PATHS))
    found = classify_engine(dict(zip(ENGINE_PATHS, answers, strict=True)))
    if found is None:
        raise ProbeFailed(f"nothing PAIR or engine-like answers at {url_host(address)}:{port}")
    return found


def classify_engine(answers: Mapping[str, Any]) -> EngineAnswer | None:
    """Tell a bare engine from the JSON its endpoints answered (``None`` for no answer)."""
    if _is_dict_with(answers.get("/api/version"), "version", str):
        return EngineAnswer(
            "ollama",
            NodeEngineModels(
                models=_ollama_names(answers.get("/api/tags")),
                loaded=_ollama_names(answers.get("/api/ps")),
            ),
        )
    openai_models = _openai_ids(answers.get("/v1/models"))
    if _is_dict_with(answers.get("/lmstudio-greeting"), "lmstudio", bool):
        return EngineAnswer("lmstudio", NodeEngineModels(models=openai_models))
    if _is_dict_with(answers.get("/health"), "status", str) and openai_models is not None:
        return EngineAnswer(
            "llamacpp", NodeEngineModels(models=openai_models, loaded=openai_models)
        )
    if openai_models is not None:
        return EngineAnswer("openai", NodeEngineModels(models=openai_models))
    return None


def _not_reached(exc: Exception) -> bool:
    # A failed TLS handshake is a connector error too, but something did answer there.
    if isinstance(exc, aiohttp.ClientSSLError):
        return False
    return isinstance(exc, aiohttp.ClientConnectorError | TimeoutError)


async def _read_bounded(response: aiohttp.ClientResponse) -> bytes:
    declared = response.content_length
    if declared is not None and declared > MAX_BODY_BYTES:
        raise ValueError(f"body of {declared} bytes is over the {MAX_BODY_BYTES} byte limit")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ValueError(f"body is over the {MAX_BODY_BYTES} byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def _is_dict_with(document: Any, key: str, kind: type) -> bool:
    return isinstance(document, dict) and isinstance(document.get(key), kind)


def _ollama_names(document: Any) -> list[str] | None:
    if not isinstance(document, dict) or not isinstance(document.get("models"), list):
        return None
    names = [item.get("name") for item in document["models"] if isinstance(item, dict)]
    return [name for name in names if isinstance(name, str)]


def _openai_ids(document: Any) -> list[str] | None:
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        return None
    ids = [item.get("id") for item in document["data"] if isinstance(item, dict)]
    return [model for model in ids if isinstance(model, str)]
