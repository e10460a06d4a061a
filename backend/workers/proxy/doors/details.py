"""What a model is (family, size, quantization, context, capabilities) and the Ollama-shaped
entries made of it for engines that do not speak Ollama's API: plain functions over small
frozen values.

The sources, best first: the model's GGUF header (when its engine names the file and the file
is on this machine), then the engine's own list (llama-server's ``/v1/models`` ``meta`` and
``/props``, LM Studio's ``/api/v0/models``). Unknown fields are Ollama's empty values.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
from msgspec.structs import replace

from backend.common.gguf import GgufInfo, Scalar

# Ollama's time for a model kept loaded for ever (``keep_alive: -1``): never unloaded by time.
HELD_FOREVER = "2318-01-01T00:00:00Z"
UNKNOWN_TIME = "1970-01-01T00:00:00Z"
# The long values of a GGUF header that /api/show leaves out of model_info (Ollama nulls
# token arrays unless verbose; the template is its own field).
_LEFT_OUT_OF_INFO = frozenset({"tokenizer.chat_template"})
# llama-server names file types as llama.cpp's ``llama_model_ftype_name`` does.
_FTYPE_SUFFIXES = ((" - Small", "_S"), (" - Medium", "_M"), (" - Large", "_L"))


class ModelDetails(msgspec.Struct, frozen=True):
    """What is known of one model; empty strings and None where nothing says."""

    family: str = ""
    parameter_size: str = ""
    quantization_level: str = ""
    context_length: int | None = None
    parameter_count: int | None = None
    size: int = 0
    capabilities: tuple[str, ...] = ("completion",)
    template: str = ""
    modified_at: str = UNKNOWN_TIME
    model_info: tuple[tuple[str, Scalar], ...] = ()
    loaded_context: int | None = None


class LlamaMeta(msgspec.Struct):
    """llama-server's ``meta`` of a ``/v1/models`` entry (the model it holds)."""

    n_params: int | None = None
    size: int | None = None
    n_ctx_train: int | None = None
    n_ctx: int | None = None
    ftype: str | None = None


class LlamaModel(msgspec.Struct):
    """One llama-server ``/v1/models`` entry."""

    id: str
    meta: LlamaMeta | None = None


class LlamaModels(msgspec.Struct):
    """llama-server's ``/v1/models`` answer (also any OpenAI-shaped list: ``meta`` is optional)."""

    data: list[LlamaModel] | None


class Modalities(msgspec.Struct):
    """``/props`` ``modalities``."""

    vision: bool = False


class GenerationSettings(msgspec.Struct):
    """``/props`` ``default_generation_settings`` (the slots' context size)."""

    n_ctx: int | None = None


class LlamaProps(msgspec.Struct):
    """What llama-server's ``/props`` says of the model it holds."""

    model_path: str | None = None
    chat_template: str = ""
    modalities: Modalities | None = None
    default_generation_settings: GenerationSettings | None = None


class LmStudioModel(msgspec.Struct):
    """One LM Studio ``/api/v0/models`` entry."""

    id: str
    type: str = "llm"
    arch: str = ""
    quantization: str = ""
    state: str = ""
    max_context_length: int | None = None
    loaded_context_length: int | None = None
    capabilities: list[str] = msgspec.field(default_factory=list)


class LmStudioModels(msgspec.Struct):
    """LM Studio's ``/api/v0/models`` answer."""

    data: list[LmStudioModel] | None


def human_number(count: int) -> str:
    """A parameter count as Ollama writes it: ``1.2B``, ``7B``, ``350.5M``, ``122K``."""
    for scale, unit in ((1_000_000_000, "B"), (1_000_000, "M")):
        if count >= scale:
            value = count / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    if count >= 1000:
        return f"{count / 1000:.0f}K"
    return str(count)


def quantization_from_ftype(ftype: str) -> str:
    """llama-server's file type (``all F32``, ``Q4_K - Medium``) as a quantization level."""
    name = ftype.removeprefix("all ").strip()
    for long, short in _FTYPE_SUFFIXES:
        name = name.replace(long, short)
    return name


def capabilities_of(
    *, embedding: bool, vision: bool, template: str, tools: bool
) -> tuple[str, ...]:
    """Ollama's capability names; a chat template that reads ``tools`` can call tools."""
    if embedding:
        return ("embedding",)
    found = ["completion"]
    if vision:
        found.append("vision")
    if tools or "tools" in template:
        found.append("tools")
    return tuple(found)


def llamacpp_details(
    meta: LlamaMeta | None, props: LlamaProps | None, gguf: GgufInfo | None, modified_at: str
) -> ModelDetails:
    """A llama-server model's details: its GGUF header first, then ``meta`` and ``/props``."""
    meta = meta or LlamaMeta()
    template = (props.chat_template if props else "") or _text(gguf, "tokenizer.chat_template")
    architecture = gguf.architecture if gguf else None
    # Embedding models pool their tokens; llama.cpp reads how from the header.
    embedding = gguf is not None and f"{architecture}.pooling_type" in gguf.metadata
    count = meta.n_params or _number(gguf, "general.parameter_count")
    quantization = (gguf.quantization if gguf else None) or quantization_from_ftype(
        meta.ftype or ""
    )
    generation = props.default_generation_settings if props else None
    return ModelDetails(
        family=architecture or "",
        parameter_size=human_number(count) if count else "",
        quantization_level=quantization,
        context_length=(gguf.context_length if gguf else None) or meta.n_ctx_train,
        parameter_count=count,
        size=meta.size or 0,
        capabilities=capabilities_of(
            embedding=embedding,
            vision=bool(props and props.modalities and props.modalities.vision),
            template=template,
            tools=False,
        ),
        template=template,
        modified_at=modified_at,
        model_info=_gguf_info(gguf),
        loaded_context=meta.n_ctx or (generation.n_ctx if generation else None),
    )


def lmstudio_details(entry: LmStudioModel) -> ModelDetails:
    """An LM Studio model's details from its ``/api/v0/models`` entry."""
    return ModelDetails(
        family=entry.arch,
        quantization_level=entry.quantization,
        context_length=entry.max_context_length,
        capabilities=capabilities_of(
            embedding=entry.type == "embeddings",
            vision=entry.type == "vlm",
            template="",
            tools="tool_use" in entry.capabilities,
        ),
        loaded_context=entry.loaded_context_length or entry.max_context_length,
    )


def sized(details: ModelDetails, size: int) -> ModelDetails:
    """``details`` with the model file's size, where it is known."""
    return replace(details, size=size) if size else details


def tag_entry(engine: str, name: str, details: ModelDetails, *, loaded: bool) -> dict[str, Any]:
    """An Ollama ``/api/tags`` entry for ``name`` (with ``/api/ps``'s fields when ``loaded``)."""
    entry: dict[str, Any] = {
        "name": name,
        "model": name,
        "modified_at": details.modified_at,
        "size": details.size,
        # Ollama's digest names the manifest; a stable stand-in names the engine's model.
        "digest": hashlib.sha256(f"{engine}\0{name}".encode()).hexdigest(),
        "details": details_field(details),
    }
    if loaded:
        entry["expires_at"] = HELD_FOREVER
        entry["size_vram"] = 0  # the engine does not say how much of it is on a GPU
        entry["context_length"] = details.loaded_context or details.context_length or 0
    return entry


def details_field(details: ModelDetails) -> dict[str, Any]:
    """Ollama's ``details`` object."""
    return {
        "parent_model": "",
        "format": "gguf",
        "family": details.family,
        "families": [details.family] if details.family else None,
        "parameter_size": details.parameter_size,
        "quantization_level": details.quantization_level,
    }


def show_body(details: ModelDetails) -> dict[str, Any]:
    """Ollama's ``/api/show`` answer for a model of another engine."""
    info: dict[str, Any] = dict(details.model_info)
    if details.family:
        info.setdefault("general.architecture", details.family)
        if details.context_length:
            info.setdefault(f"{details.family}.context_length", details.context_length)
    if details.parameter_count:
        info.setdefault("general.parameter_count", details.parameter_count)
    return {
        "modelfile": "",
        "parameters": "",
        "template": details.template,
        "details": details_field(details),
        "model_info": info,
        "capabilities": list(details.capabilities),
        "modified_at": details.modified_at,
    }


def _gguf_info(gguf: GgufInfo | None) -> tuple[tuple[str, Scalar], ...]:
    if gguf is None:
        return ()
    return tuple(sorted((k, v) for k, v in gguf.metadata.items() if k not in _LEFT_OUT_OF_INFO))


def _text(gguf: GgufInfo | None, key: str) -> str:
    value = gguf.metadata.get(key) if gguf else None
    return value if isinstance(value, str) else ""


def _number(gguf: GgufInfo | None, key: str) -> int | None:
    value = gguf.metadata.get(key) if gguf else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
