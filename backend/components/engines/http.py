"""HTTP calls to a running engine with a deadline; failures become typed RPC errors."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp
import msgspec

from backend.core.plain_errors import plain_error
from backend.protocol import errors
from backend.protocol.types.base import EngineName


class EngineEndpoint(msgspec.Struct, frozen=True):
    """Where a running engine answers HTTP, the session to ask it through, and the names its
    errors are reported under."""

    engine: EngineName
    display_name: str
    base_url: str  # ``http://host:port``
    port: int
    session: aiohttp.ClientSession
    # Sent with every request: the key of an engine PAIR launched with one (``engine_key``).
    headers: Mapping[str, str] = msgspec.field(default_factory=dict)


async def get_json(engine: EngineEndpoint, path: str, *, timeout: float) -> Any:
    """GET a JSON document from the engine, or raise ``Unavailable`` saying why."""
    return await request_json(engine, "GET", path, None, timeout=timeout)


async def request_json(
    engine: EngineEndpoint, method: str, path: str, body: Any, *, timeout: float
) -> Any:
    """One request; a non-2xx answer raises with the engine's own error text."""
    url = engine.base_url + path
    try:
        async with asyncio.timeout(timeout):
            async with engine.session.request(
                method, url, json=body, headers=engine.headers
            ) as response:
                text = await response.text()
                if response.status >= 400:
                    raise errors.InternalError(
                        f"{engine.display_name} answered {response.status}: "
                        f"{engine_error_text(text)}",
                        {"engine": engine.engine, "status": response.status},
                    )
                return _parse(text)
    except TimeoutError:
        raise errors.Unavailable(
            f"{engine.display_name} did not answer {method} {path} within {timeout:g} s"
        ) from None
    except aiohttp.ClientError as exc:
        reason = plain_error(exc, f"port {engine.port}")
        raise errors.Unavailable(f"{engine.display_name} is not reachable: {reason}") from None


def engine_error_text(text: str) -> str:
    """The message inside an engine's error body (Ollama, OpenAI and llama.cpp shapes)."""
    document = _parse(text)
    if isinstance(document, dict):
        error = document.get("error")
        if isinstance(error, str):
            return error
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return text.strip()[:500] or "(empty body)"


def _parse(text: str) -> Any:
    import json

    try:
        return json.loads(text) if text.strip() else None
    except ValueError:
        return text
