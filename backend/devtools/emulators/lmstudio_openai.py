"""The LM Studio emulator's OpenAI-compatible routes (``/v1/*`` and the ``/api/v0`` variants)."""

from __future__ import annotations

import secrets
import string
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from backend.devtools.emulators import openai_wire as oai
from backend.devtools.emulators.catalog import ModelSpec
from backend.devtools.emulators.generation import Metrics, paced_tokens
from backend.devtools.emulators.lmstudio_http import (
    engine_of,
    express_json,
    model_not_found,
    no_models_loaded,
    read_body,
)
from backend.devtools.emulators.lmstudio_state import LmStudioEngine
from backend.devtools.emulators.options import GenerationOptions, include_usage, openai_options
from backend.devtools.emulators.tokens import (
    Reply,
    count_tokens,
    embedding,
    natural_length,
    plan_reply,
    reply_seed,
)
from backend.devtools.emulators.wire import SseStream, js_json

TokenSink = Callable[[str], Awaitable[None]]
_ALPHABET = string.ascii_lowercase + string.digits
_STOP_REASONS = {"stop": "eosFound", "length": "maxPredictedTokensReached"}


class Inference(msgspec.Struct, frozen=True):
    """A parsed inference request: model as named, the model itself, prompt and limits."""

    model: str
    spec: ModelSpec
    prompt: str
    prompt_tokens: int
    options: GenerationOptions
    ttl_seconds: float | None


def _completion_id(prefix: str) -> str:
    return prefix + "-" + "".join(secrets.choice(_ALPHABET) for _ in range(21))


def _resolve(engine: LmStudioEngine, model: str) -> ModelSpec | web.Response:
    loaded = engine.scheduler.find_loaded(model) if model else None
    if loaded is None and not model and engine.scheduler.instances:
        loaded = next(iter(engine.scheduler.instances.values()))
    if loaded is not None:
        return loaded.spec
    spec = engine.catalog.find(model) if model else None
    if not engine.config.jit and not engine.scheduler.instances:
        return no_models_loaded()
    if spec is None or not engine.config.jit:
        return model_not_found(engine, model)
    return spec


def _parse(
    engine: LmStudioEngine, body: dict[str, Any], prompt: str, prompt_tokens: int
) -> Inference | web.Response:
    model = str(body.get("model") or "")
    resolved = _resolve(engine, model)
    if isinstance(resolved, web.Response):
        return resolved
    options = openai_options(body, default_temperature=None)
    if options.num_predict is not None and options.num_predict < 0:  # -1: no limit
        options = GenerationOptions(None, options.seed, options.stop, None, options.temperature)
    ttl = body.get("ttl")
    ttl_seconds = float(ttl) if isinstance(ttl, int | float) and ttl > 0 else None
    return Inference(model or resolved.name, resolved, prompt, prompt_tokens, options, ttl_seconds)


async def _generate(
    request: web.Request, parsed: Inference, endpoint: str, sink: TokenSink
) -> tuple[Reply, Metrics]:
    engine = engine_of(request)
    record = engine.log.open(parsed.model, endpoint)
    with engine.log.tracking(record):
        jit, ttl = engine.config.jit, parsed.ttl_seconds
        async with (
            engine.scheduler.using(parsed.model, parsed.spec, jit=jit, ttl_seconds=ttl) as instance,
            instance.slots.slot(),
        ):
            engine.log.started(record, instance.instance_id)
            seed = reply_seed(parsed.spec.name, parsed.prompt, parsed.options.seed)
            reply = plan_reply(
                seed,
                natural_tokens=natural_length(seed, engine.config.reply_tokens),
                num_predict=parsed.options.num_predict,
                stop=parsed.options.stop,
            )
            metrics = Metrics()
            tokens = paced_tokens(
                reply,
                prompt_tokens=parsed.prompt_tokens,
                timing=engine.config.timing.for_model(parsed.spec.name),
                clock=engine.clock,
                log=engine.log,
                record=record,
                metrics=metrics,
                finish_prompt_on_cancel=engine.config.finish_prompt_on_cancel,
            )
            async for token in tokens:
                await sink(token)
            engine.log.generated(record)
    return reply, metrics


def _chat_prompt(messages: list[Any]) -> tuple[str, int]:
    contents = [str(m.get("content") or "") if isinstance(m, dict) else "" for m in messages]
    return "\n".join(contents), sum(count_tokens(text) + 4 for text in contents)


async def chat_completions(request: web.Request, *, v0: bool = False) -> web.StreamResponse:
    """``POST /v1/chat/completions``: JSON or OpenAI SSE ending in ``data: [DONE]``."""
    engine = engine_of(request)
    body = await read_body(request)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return express_json({"error": "'messages' field is required"}, 400)
    parsed = _parse(engine, body, *_chat_prompt(messages))
    if isinstance(parsed, web.Response):
        return parsed
    if parsed.spec.is_embedding:
        return _not_an_llm(parsed.model)
    completion = oai.Completion(
        oai.LMSTUDIO, _completion_id("chatcmpl"), int(engine.clock.wall()), parsed.model
    )
    endpoint = "/api/v0/chat/completions" if v0 else "/v1/chat/completions"
    if body.get("stream"):
        return await _stream(request, parsed, completion, endpoint, include_usage(body), chat=True)
    reply, metrics = await _generate(request, parsed, endpoint, _discard)
    counts = oai.usage(metrics.prompt_eval_count, metrics.eval_count)
    result = oai.chat_completion(completion, reply.text, reply.done_reason, counts)
    return express_json(_with_v0_extras(result, parsed, reply, metrics) if v0 else result)


async def completions(request: web.Request, *, v0: bool = False) -> web.StreamResponse:
    """``POST /v1/completions``: ``text_completion`` objects."""
    engine = engine_of(request)
    body = await read_body(request)
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        return express_json({"error": "'prompt' field is required"}, 400)
    parsed = _parse(engine, body, prompt, count_tokens(prompt))
    if isinstance(parsed, web.Response):
        return parsed
    if parsed.spec.is_embedding:
        return _not_an_llm(parsed.model)
    completion = oai.Completion(
        oai.LMSTUDIO, _completion_id("cmpl"), int(engine.clock.wall()), parsed.model
    )
    endpoint = "/api/v0/completions" if v0 else "/v1/completions"
    if body.get("stream"):
        return await _stream(request, parsed, completion, endpoint, include_usage(body), chat=False)
    reply, metrics = await _generate(request, parsed, endpoint, _discard)
    counts = oai.usage(metrics.prompt_eval_count, metrics.eval_count)
    result = oai.text_completion(completion, reply.text, reply.done_reason, counts)
    return express_json(_with_v0_extras(result, parsed, reply, metrics) if v0 else result)


async def _stream(
    request: web.Request,
    parsed: Inference,
    completion: oai.Completion,
    endpoint: str,
    with_usage: bool,
    *,
    chat: bool,
) -> web.StreamResponse:
    stream = SseStream(request, encode=js_json)
    stream.set_header("X-Powered-By", "Express")
    stream.set_header("Cache-Control", "no-cache")
    sent = 0

    async def sink(token: str) -> None:
        nonlocal sent
        if chat:
            await stream.send(oai.chat_chunk(completion, token, first=sent == 0))
        else:
            await stream.send(oai.text_chunk(completion, token, None))
        sent += 1

    try:
        reply, metrics = await _generate(request, parsed, endpoint, sink)
    except ConnectionResetError:
        return stream.response
    if chat:
        await stream.send(oai.chat_finish_chunk(completion, reply.done_reason))
    else:
        await stream.send(oai.text_chunk(completion, "", reply.done_reason))
    if with_usage:
        object_type = "chat.completion.chunk" if chat else "text_completion"
        counts = oai.usage(metrics.prompt_eval_count, metrics.eval_count)
        await stream.send(oai.usage_chunk(completion, object_type, counts))
    await stream.send_done()
    return await stream.finish()


async def embeddings(request: web.Request) -> web.Response:
    """``POST /v1/embeddings``."""
    engine = engine_of(request)
    body = await read_body(request)
    raw = body.get("input")
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        return express_json({"error": "'input' field is required"}, 400)
    parsed = _parse(engine, body, "\n".join(texts), sum(count_tokens(t) for t in texts))
    if isinstance(parsed, web.Response):
        return parsed
    if not parsed.spec.is_embedding:
        message = f'Model "{parsed.model}" is not an embedding model'
        return express_json(oai.error_body(message, 400, param="model"), 400)
    await _generate(request, parsed, "/v1/embeddings", _discard)
    data = [
        {"object": "embedding", "embedding": embedding(t, parsed.spec.embedding_length), "index": i}
        for i, t in enumerate(texts)
    ]
    usage = {"prompt_tokens": parsed.prompt_tokens, "total_tokens": parsed.prompt_tokens}
    return express_json({"object": "list", "data": data, "model": parsed.model, "usage": usage})


def _not_an_llm(model: str) -> web.Response:
    message = f'Model "{model}" is an embedding model and cannot be used for completions'
    return express_json(oai.error_body(message, 400, param="model"), 400)


def _with_v0_extras(
    result: dict[str, Any], parsed: Inference, reply: Reply, metrics: Metrics
) -> dict[str, Any]:
    """``/api/v0`` adds stats, model_info and runtime to the OpenAI shape."""
    seconds = max(metrics.eval_ns, 1) / 1e9
    stats = {
        "tokens_per_second": round(metrics.eval_count / seconds, 3),
        "time_to_first_token": round(metrics.prompt_eval_ns / 1e9, 3),
        "generation_time": round(seconds, 3),
        "stop_reason": _STOP_REASONS[reply.done_reason],
    }
    model_info = {
        "arch": parsed.spec.family,
        "quant": parsed.spec.quantization,
        "format": "gguf",
        "context_length": parsed.spec.context_length,
    }
    runtime = {
        "name": "llama.cpp-linux-x86_64-avx2",
        "version": "1.52.0",
        "supported_formats": ["gguf"],
    }
    return {**result, "stats": stats, "model_info": model_info, "runtime": runtime}


async def _discard(_: str) -> None:
    return None


async def v0_chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /api/v0/chat/completions``."""
    return await chat_completions(request, v0=True)


async def v0_completions(request: web.Request) -> web.StreamResponse:
    """``POST /api/v0/completions``."""
    return await completions(request, v0=True)
