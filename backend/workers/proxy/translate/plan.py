"""Per attempt: does the request pass through to the engine untouched, or is it translated?

A request in an API its engine speaks (``native.py``) passes through byte for byte (no added
work); any other is translated to the OpenAI API and its answer back.
"""

from __future__ import annotations

from backend.workers.proxy.doors.wire import dialect_for
from backend.workers.proxy.translate import anthropic_api, ollama_api
from backend.workers.proxy.translate.base import Translation
from backend.workers.proxy.translate.native import speaks


def translation_for(engine: str, path: str, body: bytes) -> Translation | None:
    """How a request to ``path`` (with its query) reaches ``engine``: None to pass it through.

    Raises ``Unhonoured`` or ``Malformed`` (answered 400) when it cannot be translated."""
    dialect = dialect_for(path)
    if speaks(engine, dialect):
        return None
    api_path = path.split("?", 1)[0]
    if dialect == "ollama" and api_path in ollama_api.OLLAMA_PATHS:
        return ollama_api.translate(api_path, body)
    if dialect == "anthropic" and api_path in anthropic_api.ANTHROPIC_PATHS:
        return anthropic_api.translate(api_path, body)
    return None
