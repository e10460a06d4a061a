"""Which client APIs each engine speaks as they are (docs/ROUTING.md, "One door, every model").

Every engine speaks the OpenAI API; llama-server also Anthropic's Messages, Ollama its own.
Ollama's and LM Studio's own Messages layers (recent versions only) are not counted on, so the
translation works with every version of them.
"""

from __future__ import annotations

from collections.abc import Mapping

from backend.workers.proxy.doors.wire import Dialect

NATIVE_DIALECTS: Mapping[str, tuple[Dialect, ...]] = {
    "ollama": ("ollama", "openai"),
    "lmstudio": ("openai",),
    "llamacpp": ("openai", "anthropic"),
}
_OPENAI_ONLY: tuple[Dialect, ...] = ("openai",)


def speaks(engine: str, dialect: Dialect) -> bool:
    """Whether ``engine`` takes requests in ``dialect`` as they are."""
    return dialect in NATIVE_DIALECTS.get(engine, _OPENAI_ONLY)
