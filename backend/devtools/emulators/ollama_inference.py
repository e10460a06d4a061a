"""The Ollama emulator's inference routes: generate, chat, embed and the legacy embeddings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from backend.devtools.emulators.catalog import ModelSpec
from backend.devtools.emulators.ollama_http import (
    engine_of,
    ollama_error,
    ollama_json,
    read_body,
    utc_time,
)
from backend.devtools.emulators.ollama_jobs import (
    Job,
    Outcome,
    chat_prompt,
    parse_keep_alive,
    parse_messages,
    run_job,
)
from backend.devtools.emulators.ollama_scheduler import ServerBusy
from backend.devtools.emulators.ollama_state import OllamaEngine
from backend.devtools.emulators.options import RequestError, parse_ollama_options
from backend.devtools.emulators.tokens import count_tokens, embedding, token_ids
from backend.devtools.emulators.wire import NdjsonStream

ChunkBuilder = Callable[[str], dict[str, Any]]
FinalBuilder = Callable[[Outcome, bool], dict[str, Any]]


async def generate(request: web.Request) -> web.StreamResponse:
    """``POST /api/generate``: completion, or load/unload with an empty prompt."""
    engine = engine_of(request)
    body = await read_body(request)
    keep_alive = parse_keep_alive(body)
    model = str(body.get("model") or "")
    spec = engine.find(model) if model else None
    if spec is None:
        return _missing_model(model)
    prompt, system = str(body.get("prompt") or ""), str(body.get("system") or "")
    if not prompt and keep_alive == 0:
        engine.scheduler.expire(spec.name)
        return ollama_json(_generate_object(engine, model, "", done_reason="unload"))
    refusal = _refusal(spec, body, "generate")
    if refusal is not None:
        return refusal
    if body.get("raw") and (body.get("template") or system or body.get("context")):
        return ollama_error("raw mode does not support template, system, or context", 400)
    if not prompt:
        return await _load_only(request, spec, body, keep_alive, chat=False)
    prompt_tokens = count_tokens(system) + count_tokens(prompt) + 4  # + template tokens
    job = _job(model, spec, system + "\n" + prompt, prompt_tokens, body, keep_alive)
    if job is None:
        return _option_error(body)
    chunk, final = _generate_builders(engine, body, prompt)
    return await respond(request, job, "/api/generate", chunk, final, _streams(body))


def _generate_builders(
    engine: OllamaEngine, body: dict[str, Any], prompt: str
) -> tuple[ChunkBuilder, FinalBuilder]:
    """How ``/api/generate`` writes its chunks and its final object (``context`` unless raw)."""
    model = str(body["model"])

    def chunk(token: str) -> dict[str, Any]:
        return _generate_object(engine, model, token)

    def final(outcome: Outcome, streamed: bool) -> dict[str, Any]:
        text = "" if streamed else outcome.reply.text
        done = _generate_object(engine, model, text, done_reason=outcome.reply.done_reason)
        if not body.get("raw"):
            done["context"] = token_ids(prompt + outcome.reply.text)
        return {**done, **outcome.metric_fields()}

    return chunk, final


async def chat(request: web.Request) -> web.StreamResponse:
    """``POST /api/chat``: chat completion, or load/unload with no messages."""
    engine = engine_of(request)
    body = await read_body(request)
    keep_alive = parse_keep_alive(body)
    messages = parse_messages(body.get("messages"))
    model = str(body.get("model") or "")
    if not model:
        return ollama_error("model is required", 400)
    spec = engine.find(model)
    if spec is None:
        return ollama_error(f"model '{model}' not found", 404)
    if not messages and keep_alive == 0:
        engine.scheduler.expire(spec.name)
        return ollama_json(_chat_object(engine, model, "", done_reason="unload"))
    refusal = _refusal(spec, body, "chat")
    if refusal is not None:
        return refusal
    if not messages:
        return await _load_only(request, spec, body, keep_alive, chat=True)
    prompt, prompt_tokens = chat_prompt(messages)
    job = _job(model, spec, prompt, prompt_tokens, body, keep_alive)
    if job is None:
        return _option_error(body)

    def chunk(token: str) -> dict[str, Any]:
        return _chat_object(engine, model, token)

    def final(outcome: Outcome, streamed: bool) -> dict[str, Any]:
        text = "" if streamed else outcome.reply.text
        done = _chat_object(engine, model, text, done_reason=outcome.reply.done_reason)
        return {**done, **outcome.metric_fields()}

    return await respond(request, job, "/api/chat", chunk, final, _streams(body))


async def respond(
    request: web.Request,
    job: Job,
    endpoint: str,
    chunk: ChunkBuilder,
    final: FinalBuilder,
    streaming: bool,
) -> web.StreamResponse:
    """Run ``job`` and answer as NDJSON (default) or one JSON object (``"stream": false``)."""
    engine = engine_of(request)
    stream = NdjsonStream(request) if streaming else None

    async def sink(token: str) -> None:
        if stream is not None:
            await stream.send(chunk(token))

    record = engine.log.open(job.model_field, endpoint)
    try:
        with engine.log.tracking(record):
            outcome = await run_job(engine, job, record, sink)
            if stream is None:
                return ollama_json(final(outcome, False))
            await stream.send(final(outcome, True))
            return await stream.finish()
    except ServerBusy as exc:
        return ollama_error(str(exc), 503)
    except ConnectionResetError:
        # The client is gone; nothing more can be sent.
        return stream.response if stream is not None else web.Response(status=499)


async def embed(request: web.Request) -> web.Response:
    """``POST /api/embed``: one normalized vector per input string."""
    engine = engine_of(request)
    body = await read_body(request)
    keep_alive = parse_keep_alive(body)
    inputs = _embed_inputs(body.get("input"))
    model = str(body.get("model") or "")
    spec = engine.find(model) if model else None
    if spec is None:
        return ollama_error(f"model '{model}' not found", 404)
    dimensions = body.get("dimensions")
    size = spec.embedding_length
    if isinstance(dimensions, int) and 0 < dimensions < size:
        size = dimensions
    try:
        outcome = await run_embedding(engine, spec, model, "/api/embed", inputs, keep_alive)
    except ServerBusy as exc:
        return ollama_error(str(exc), 503)
    vectors = [embedding(text, size) for text in inputs]
    result: dict[str, Any] = {"model": model, "embeddings": vectors}
    if inputs:
        result.update(outcome)
    return ollama_json(result)


async def embeddings(request: web.Request) -> web.Response:
    """``POST /api/embeddings`` (legacy): one vector for ``prompt``; empty prompt loads."""
    engine = engine_of(request)
    body = await read_body(request)
    keep_alive = parse_keep_alive(body)
    model = str(body.get("model") or "")
    if not model:
        return ollama_error("model is required", 400)
    spec = engine.find(model)
    if spec is None:
        # This handler skips the name check, so the scheduler's older message shows.
        return ollama_error(f'model "{model}" not found, try pulling it first', 404)
    prompt = str(body.get("prompt") or "")
    try:
        await run_embedding(
            engine, spec, model, "/api/embeddings", [prompt] if prompt else [], keep_alive
        )
    except ServerBusy as exc:
        return ollama_error(str(exc), 503)
    return ollama_json({"embedding": embedding(prompt, spec.embedding_length) if prompt else []})


async def run_embedding(
    engine: OllamaEngine,
    spec: ModelSpec,
    model: str,
    endpoint: str,
    inputs: list[str],
    keep_alive: int | None,
) -> dict[str, int]:
    """Load the model, hold a slot while "embedding"; the durations Ollama reports."""
    clock = engine.clock
    started = clock.monotonic()
    record = engine.log.open(model, endpoint)
    with engine.log.tracking(record):
        async with engine.scheduler.using(spec, None, keep_alive) as runner:
            loaded = clock.monotonic()
            if inputs:
                async with runner.slots.slot():
                    engine.log.started(record, runner.spec.name)
                    tokens = sum(count_tokens(text) for text in inputs)
                    await clock.sleep(tokens * engine.config.timing.prompt_token_delay)
            else:
                engine.log.started(record, runner.spec.name)
    return {
        "total_duration": max(1, int((clock.monotonic() - started) * 1e9)),
        "load_duration": max(1, int((loaded - started) * 1e9)),
        "prompt_eval_count": sum(count_tokens(text) for text in inputs),
    }


def _embed_inputs(raw: object) -> list[str]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [raw] if raw else []
    if isinstance(raw, list) and all(isinstance(item, str) for item in raw):
        return list(raw)
    raise RequestError("invalid input type")


async def _load_only(
    request: web.Request,
    spec: ModelSpec,
    body: dict[str, Any],
    keep_alive: int | None,
    *,
    chat: bool,
) -> web.Response:
    """Empty prompt / no messages: load the model and answer ``done_reason: "load"``."""
    engine = engine_of(request)
    model = str(body["model"])
    try:
        options = parse_ollama_options(body.get("options"))
    except RequestError as exc:
        return ollama_error(str(exc), 500)
    endpoint = "/api/chat" if chat else "/api/generate"
    record = engine.log.open(model, endpoint)
    try:
        with engine.log.tracking(record):
            async with engine.scheduler.using(spec, options.num_ctx, keep_alive) as runner:
                engine.log.started(record, runner.spec.name)
    except ServerBusy as exc:
        return ollama_error(str(exc), 503)
    build = _chat_object if chat else _generate_object
    return ollama_json(build(engine, model, "", done_reason="load"))


def _job(
    model: str,
    spec: ModelSpec,
    prompt: str,
    prompt_tokens: int,
    body: dict[str, Any],
    keep_alive: int | None,
) -> Job | None:
    try:
        options = parse_ollama_options(body.get("options"))
    except RequestError:
        return None
    return Job(model, spec, prompt, prompt_tokens, options, keep_alive)


def _option_error(body: dict[str, Any]) -> web.Response:
    # Ollama validates options while scheduling; the error falls to a 500.
    try:
        parse_ollama_options(body.get("options"))
    except RequestError as exc:
        return ollama_error(str(exc), 500)
    return ollama_error("invalid options", 500)


def _refusal(spec: ModelSpec, body: dict[str, Any], action: str) -> web.Response | None:
    model = str(body.get("model"))
    if body.get("think") not in (None, False, "") and "thinking" not in spec.capabilities:
        return ollama_error(f'"{model}" does not support thinking', 400)
    if spec.is_embedding:
        return ollama_error(f'"{model}" does not support {action}', 400)
    if action == "chat" and body.get("tools") and "tools" not in spec.capabilities:
        return ollama_error(f'"{model}" does not support tools', 400)
    return None


def _streams(body: dict[str, Any]) -> bool:
    """Ollama streams unless ``"stream": false`` is sent."""
    return body.get("stream") is not False


def _missing_model(model: str) -> web.Response:
    if not model:
        return ollama_error("model is required", 400)
    return ollama_error(f"model '{model}' not found", 404)


def _generate_object(
    engine: OllamaEngine, model: str, text: str, *, done_reason: str | None = None
) -> dict[str, Any]:
    value: dict[str, Any] = {
        "model": model,
        "created_at": utc_time(engine.wall_ns()),
        "response": text,
        "done": done_reason is not None,
    }
    if done_reason is not None:
        value["done_reason"] = done_reason
    return value


def _chat_object(
    engine: OllamaEngine, model: str, text: str, *, done_reason: str | None = None
) -> dict[str, Any]:
    value: dict[str, Any] = {
        "model": model,
        "created_at": utc_time(engine.wall_ns()),
        "message": {"role": "assistant", "content": text},
    }
    if done_reason is not None:
        value["done_reason"] = done_reason
    value["done"] = done_reason is not None
    return value
