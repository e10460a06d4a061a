"""The Ollama API (``/api/chat``, ``/api/generate``, ``/api/embed``, ``/api/embeddings``) as
OpenAI requests to an engine; the answers go back through ``ollama_stream.OllamaReply``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import msgspec

from backend.workers.proxy.translate.base import (
    EngineRequest,
    LoadRequest,
    Malformed,
    Translation,
    Unhonoured,
)
from backend.workers.proxy.translate.ollama_messages import (
    Message,
    checked_tools,
    openai_messages,
    user_message,
)
from backend.workers.proxy.translate.ollama_options import sampling_options
from backend.workers.proxy.translate.ollama_replies import Endpoint, created_at
from backend.workers.proxy.translate.ollama_stream import OllamaReply

OLLAMA_PATHS: tuple[str, ...] = ("/api/chat", "/api/generate", "/api/embed", "/api/embeddings")

_LOAD_REQUEST = "is empty: Ollama's load request, which an OpenAI engine has no form for"


class _Request(msgspec.Struct):
    model: str = ""
    options: dict[str, object] | None = None
    keep_alive: object = None
    truncate: bool | None = None


class _GeneratingRequest(_Request):
    stream: bool | None = None
    format: str | dict[str, object] | None = None
    think: bool | str | None = None
    shift: bool | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None


class _ChatRequest(_GeneratingRequest):
    messages: list[Message] | None = None
    tools: list[msgspec.Raw] | None = None


class _GenerateRequest(_GeneratingRequest):
    prompt: str | None = None
    system: str | None = None
    images: list[str] | None = None
    raw: bool | None = None
    suffix: str | None = None
    template: str | None = None
    context: list[int] | None = None


class _EmbedRequest(_Request):
    input: str | list[str] | None = None
    dimensions: int | None = None


class _EmbeddingsRequest(_Request):
    prompt: str | None = None


_Built = tuple[EngineRequest, Endpoint, str]
_RequestType = TypeVar("_RequestType", bound=_Request)


def translate(path: str, body: bytes, *, now_ns: Callable[[], int] = time.time_ns) -> Translation:
    """The OpenAI request for an Ollama one (``path`` one of ``OLLAMA_PATHS``) and the
    translator of its answer; ``Malformed`` or ``Unhonoured`` if it cannot be sent."""
    started_ns = now_ns()
    request, endpoint, model = _BUILDERS[path](body)
    return Translation(request, OllamaReply(endpoint, model, started_ns, now_ns))


def _chat(body: bytes) -> _Built:
    request = _decode(body, _ChatRequest)
    model = _model(request)
    if not request.messages:
        raise load_request(request, model, chat=True)
    out: dict[str, object] = {"model": model, "messages": openai_messages(request.messages)}
    if request.tools:
        out["tools"] = checked_tools(request.tools)
    stream, ignored = _generating(request, out)
    _shaping(request, out)
    return _engine_request("/v1/chat/completions", out, stream, ignored), "chat", model


def _generate(body: bytes) -> _Built:
    request = _decode(body, _GenerateRequest)
    model = _model(request)
    for field, value in (
        ("suffix", request.suffix),
        ("template", request.template),
        ("context", request.context),
    ):
        if value:
            raise Unhonoured(field, "an OpenAI engine applies its own chat template, unseen here")
    if not request.prompt and not request.images:
        raise load_request(request, model, chat=False)
    prompt = request.prompt or ""
    if request.raw:
        return _raw_generate(request, model, prompt)
    messages: list[dict[str, object]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.append(user_message(prompt, request.images, "images"))
    out: dict[str, object] = {"model": model, "messages": messages}
    stream, ignored = _generating(request, out)
    _shaping(request, out)
    return _engine_request("/v1/chat/completions", out, stream, ignored), "generate", model


def _raw_generate(request: _GenerateRequest, model: str, prompt: str) -> _Built:
    """A raw prompt goes to ``/v1/completions`` as is, with no template around it."""
    if request.system:
        raise Malformed("raw mode does not support template, system, or context")
    for field, value in (
        ("images", request.images),
        ("format", request.format),
        ("think", request.think),
        ("logprobs", request.logprobs),
        ("top_logprobs", request.top_logprobs),
    ):
        if value:
            raise Unhonoured(field, "OpenAI's /v1/completions has no equivalent for a raw prompt")
    out: dict[str, object] = {"model": model, "prompt": prompt}
    stream, ignored = _generating(request, out)
    return _engine_request("/v1/completions", out, stream, ignored), "generate", model


def _embed(body: bytes) -> _Built:
    request = _decode(body, _EmbedRequest)
    model = _model(request)
    if not request.input:
        raise Unhonoured("input", _LOAD_REQUEST)
    out: dict[str, object] = {"model": model, "input": request.input}
    if request.dimensions is not None:
        out["dimensions"] = request.dimensions
    ignored = _ignored(request, sampling_options(request.options, None))
    return _engine_request("/v1/embeddings", out, False, ignored), "embed", model


def _embeddings(body: bytes) -> _Built:
    request = _decode(body, _EmbeddingsRequest)
    model = _model(request)
    if not request.prompt:
        raise Unhonoured("prompt", _LOAD_REQUEST)
    out: dict[str, object] = {"model": model, "input": request.prompt}
    ignored = _ignored(request, sampling_options(request.options, None))
    return _engine_request("/v1/embeddings", out, False, ignored), "embeddings", model


def _generating(
    request: _GeneratingRequest, out: dict[str, object]
) -> tuple[bool, tuple[str, ...]]:
    """Sets the stream and the sampling options; returns whether it streams and the ignored."""
    stream = request.stream is not False  # Ollama streams unless told not to
    if stream:
        out["stream"] = True
        # The final Ollama record carries the counts, which OpenAI streams only on request.
        out["stream_options"] = {"include_usage": True}
    ignored = sampling_options(request.options, out)
    if request.shift is not None:
        ignored.append("shift")
    return stream, _ignored(request, ignored)


def _shaping(request: _GeneratingRequest, out: dict[str, object]) -> None:
    """Sets the answer's format, the reasoning asked for and the log probabilities."""
    if request.format:
        out["response_format"] = _response_format(request.format)
    if request.think is not None:
        _think(request.think, out)
    if request.logprobs is not None:
        out["logprobs"] = request.logprobs
    if request.top_logprobs is not None:
        if not 0 <= request.top_logprobs <= 20:
            raise Malformed("top_logprobs must be between 0 and 20")
        out["top_logprobs"] = request.top_logprobs


def _response_format(format_: str | dict[str, object]) -> dict[str, object]:
    if isinstance(format_, dict):
        return {"type": "json_schema", "json_schema": {"name": "response", "schema": format_}}
    if format_ == "json":
        return {"type": "json_object"}
    raise Malformed(f'invalid format {format_!r}: expected "json" or a JSON schema')


def _think(think: bool | str, out: dict[str, object]) -> None:
    if isinstance(think, bool):
        out["chat_template_kwargs"] = {"enable_thinking": think}
    elif think in ("low", "medium", "high"):
        out["reasoning_effort"] = think
    elif think == "max":
        raise Unhonoured("think", 'OpenAI\'s reasoning_effort has no "max"; use "high"')
    else:
        raise Malformed(f"think: {think!r} is not true, false, low, medium, high or max")


def _ignored(request: _Request, ignored: list[str]) -> tuple[str, ...]:
    if request.keep_alive is not None:
        ignored.append("keep_alive")
    if request.truncate is not None:
        ignored.append("truncate")
    return tuple(ignored)


def _decode(body: bytes, kind: type[_RequestType]) -> _RequestType:
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.MsgspecError as error:
        raise Malformed(str(error)) from error


def _model(request: _Request) -> str:
    if not request.model:
        raise Malformed("model is required")
    return request.model


def _engine_request(
    path: str, out: dict[str, object], stream: bool, ignored: tuple[str, ...]
) -> EngineRequest:
    return EngineRequest(path, msgspec.json.encode(out), stream, ignored)


_BUILDERS: dict[str, Callable[[bytes], _Built]] = {
    "/api/chat": _chat,
    "/api/generate": _generate,
    "/api/embed": _embed,
    "/api/embeddings": _embeddings,
}


def load_request(request: _GeneratingRequest, model: str, *, chat: bool) -> LoadRequest:
    """Ollama's answer to its load request (``done_reason`` "unload" with ``keep_alive`` 0)."""
    unload = request.keep_alive in (0, "0", "0s", "0m")
    answer: dict[str, object] = {"model": model, "created_at": created_at(time.time_ns())}
    if chat:
        answer["message"] = {"role": "assistant", "content": ""}
    else:
        answer["response"] = ""
    answer["done"] = True
    answer["done_reason"] = "unload" if unload else "load"
    return LoadRequest(msgspec.json.encode(answer))
