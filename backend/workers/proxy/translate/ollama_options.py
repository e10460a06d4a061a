"""Ollama's ``options`` as OpenAI request fields (llama-server takes its sampling names)."""

from __future__ import annotations

from collections.abc import Callable

from backend.workers.proxy.translate.base import Malformed, Unhonoured

# Settings of the loaded model rather than of one request: the engine sets them its own way.
_LOAD_TIME = frozenset(
    {
        "num_ctx",
        "num_gpu",
        "num_thread",
        "num_batch",
        "main_gpu",
        "use_mmap",
        "use_mlock",
        "numa",
        "low_vram",
        "f16_kv",
        "vocab_only",
        "num_keep",
    }
)


def _number(field: str, value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Malformed(f"{field} must be a number")
    return value


def _integer(field: str, value: object) -> int:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(f"{field} must be an integer")
    return value


def _max_tokens(field: str, value: object) -> int | None:
    tokens = _integer(field, value)
    return None if tokens < 0 else tokens  # -1 (no limit) and -2 (fill the context)


def _stop(field: str, value: object) -> object:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise Malformed(f"{field} must be a string or a list of strings")


_Converter = Callable[[str, object], object]

# Ollama option -> (OpenAI field, check and conversion; None from it leaves the field out).
_SAMPLING: dict[str, tuple[str, _Converter]] = {
    "num_predict": ("max_tokens", _max_tokens),
    "stop": ("stop", _stop),
    "temperature": ("temperature", _number),
    "top_p": ("top_p", _number),
    "top_k": ("top_k", _integer),
    "min_p": ("min_p", _number),
    "seed": ("seed", _integer),
    "presence_penalty": ("presence_penalty", _number),
    "frequency_penalty": ("frequency_penalty", _number),
    "repeat_penalty": ("repeat_penalty", _number),
    "repeat_last_n": ("repeat_last_n", _integer),
    "typical_p": ("typical_p", _number),
    "mirostat": ("mirostat", _integer),
    "mirostat_tau": ("mirostat_tau", _number),
    "mirostat_eta": ("mirostat_eta", _number),
}


def sampling_options(options: dict[str, object] | None, out: dict[str, object] | None) -> list[str]:
    """Sets ``options`` on the OpenAI body ``out`` and returns the ones the engine sets its own
    way (``"options.num_ctx"``...); ``out`` None (embeddings) ignores the sampling ones too.
    Raises ``Unhonoured`` for an option no engine takes, ``Malformed`` for a wrong type."""
    ignored: list[str] = []
    for name, value in (options or {}).items():
        if value is None:
            continue  # JSON null is an option left unset
        field = f"options.{name}"
        sampling = _SAMPLING.get(name)
        if name in _LOAD_TIME or (sampling is not None and out is None):
            ignored.append(field)
        elif sampling is None:
            raise Unhonoured(field, "not an option an OpenAI engine takes")
        elif out is not None:
            converted = sampling[1](field, value)
            if converted is not None:
                out[sampling[0]] = converted
    return ignored
