"""The Ollama emulator's OpenAI compatibility layer (``/v1``), with Ollama's quirks.

Ollama translates ``/v1`` requests to its native handlers: ``stream`` defaults to false,
``temperature`` to 1.0, ids are ``chatcmpl-<0..998>``, ``system_fingerprint`` is ``fp_ollama``,
errors are OpenAI error objects, and ``/v1/models`` has ``data: null`` when nothing is installed.
"""

from __future__ import annotations

import base64
import random
import struct
import time
from typing import Any

from aiohttp import web

from backend.devtools.emulators import openai_wire as oai
from backend.devtools.emulators.catalog import ModelSpec, parse_model_name
from backend.devtools.emulators.ollama_http import engine_of
from backend.devtools.emulators.ollama_inference import run_embedding
from backend.devtools.emulators.ollama_jobs import (
    Job,
    Outcome,
    chat_prompt,
    parse_messages,
    run_job,
)
from backend.devtools.emulators.ollama_scheduler import ServerBusy
from backend.devtools.emulators.options import (
    RequestError,
    include_usage,
    openai_options,
    parse_json_object,
)
from backend.devtools.emulators.tokens import count_tokens, embedding
from backend.devtools.emulators.wire import SseStream, go_json, json_response


def openai_json(value: Any, status: int = 200) -> web.Response:
    """The compatibility writer's ``json.NewEncoder``: a trailing newline, plain JSON type."""
    return json_response(go_json(value) + "\n", status=status, content_type="application/json")


def openai_error(message: str, status: int) -> web.Response:
    """An OpenAI error object with Ollama's status-to-type mapping."""
    return openai_json(oai.error_body(message, status), status)


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        raise RequestError("EOF")
    return parse_json_object(raw)


async def list_models(request: web.Request) -> web.Response:
    """``GET /v1/models``; ``data`` is ``null`` when no model is installed (a nil Go slice)."""
    specs = engine_of(request).catalog.newest_first()
    data = [_model_object(spec.name, spec) for spec in specs] or None
    return openai_json({"object": "list", "data": data})


async def retrieve_model(request: web.Request) -> web.Response:
    """``GET /v1/models/{model}``."""
    name = request.match_info["model"]
    spec = engine_of(request).find(name)
    if spec is None:
        return openai_error(f"model '{name}' not found", 404)
    return openai_json(_model_object(name, spec))


def _model_object(name: str, spec: ModelSpec) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": spec.modified_ns // 1_000_000_000,
        "owned_by": parse_model_name(name).namespace,
    }


def _resolve(request: web.Request, model: str, action: str) -> ModelSpec | web.Response:
    if not model:
        return openai_error("model is required", 400)
    spec = engine_of(request).find(model)
    if spec is None:
        return openai_error(f"model '{model}' not found", 404)
    if spec.is_embedding:
        return openai_error(f'"{model}" does not support {action}', 400)
    return spec


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions`` (JSON, or SSE ending in ``data: [DONE]``)."""
    try:
        body = await _body(request)
        messages = parse_messages(body.get("messages"))
        if not messages:
            return openai_error("[] is too short - 'messages'", 400)
        options = openai_options(body, default_temperature=1.0)
    except RequestError as exc:
        return openai_error(str(exc), 400)
    model = str(body.get("model") or "")
    spec = _resolve(request, model, "chat")
    if isinstance(spec, web.Response):
        return spec
    prompt, prompt_tokens = chat_prompt(messages)
    job = Job(model, spec, prompt, prompt_tokens, options, None)
    completion = _completion(model, "chatcmpl")
    if body.get("stream"):
        return await _stream_chat(request, job, completion, include_usage(body))
    outcome = await _run(request, job, "/v1/chat/completions", None)
    if not isinstance(outcome, Outcome):
        return outcome
    counts = oai.usage(outcome.metrics.prompt_eval_count, outcome.metrics.eval_count)
    reason = outcome.reply.done_reason
    return openai_json(oai.chat_completion(completion, outcome.reply.text, reason, counts))


async def _stream_chat(
    request: web.Request, job: Job, completion: oai.Completion, with_usage: bool
) -> web.StreamResponse:
    stream = SseStream(request, encode=go_json)
    sent = 0

    async def sink(token: str) -> None:
        nonlocal sent
        await stream.send(oai.chat_chunk(completion, token, first=sent == 0))
        sent += 1

    outcome = await _run(request, job, "/v1/chat/completions", sink, stream)
    if not isinstance(outcome, Outcome):
        return outcome
    await stream.send(oai.chat_finish_chunk(completion, outcome.reply.done_reason))
    if with_usage:
        counts = oai.usage(outcome.metrics.prompt_eval_count, outcome.metrics.eval_count)
        await stream.send(oai.usage_chunk(completion, "chat.completion.chunk", counts))
    await stream.send_done()
    return await stream.finish()


async def completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/completions`` (``text_completion`` objects, SSE when streaming)."""
    try:
        body = await _body(request)
        options = openai_options(body, default_temperature=None)
    except RequestError as exc:
        return openai_error(str(exc), 400)
    model = str(body.get("model") or "")
    spec = _resolve(request, model, "generate")
    if isinstance(spec, web.Response):
        return spec
    prompt = str(body.get("prompt") or "")
    job = Job(model, spec, prompt, count_tokens(prompt) + 4, options, None)
    completion = _completion(model, "cmpl")
    if body.get("stream"):
        return await _stream_text(request, job, completion, include_usage(body))
    outcome = await _run(request, job, "/v1/completions", None)
    if not isinstance(outcome, Outcome):
        return outcome
    counts = oai.usage(outcome.metrics.prompt_eval_count, outcome.metrics.eval_count)
    reason = outcome.reply.done_reason
    return openai_json(oai.text_completion(completion, outcome.reply.text, reason, counts))


async def _stream_text(
    request: web.Request, job: Job, completion: oai.Completion, with_usage: bool
) -> web.StreamResponse:
    stream = SseStream(request, encode=go_json)

    def chunk(text: str, reason: str | None) -> dict[str, Any]:
        value = oai.text_chunk(completion, text, reason)
        if with_usage:  # Ollama puts a zeroed usage on every piece when usage is asked for
            value["usage"] = oai.usage(0, 0)
        return value

    async def sink(token: str) -> None:
        await stream.send(chunk(token, None))

    outcome = await _run(request, job, "/v1/completions", sink, stream)
    if not isinstance(outcome, Outcome):
        return outcome
    await stream.send(chunk("", outcome.reply.done_reason))
    if with_usage:
        counts = oai.usage(outcome.metrics.prompt_eval_count, outcome.metrics.eval_count)
        await stream.send(oai.usage_chunk(completion, "text_completion", counts))
    await stream.send_done()
    return await stream.finish()


async def _run(
    request: web.Request,
    job: Job,
    endpoint: str,
    sink: Any,
    stream: SseStream | None = None,
) -> Outcome | web.StreamResponse:
    engine = engine_of(request)
    record = engine.log.open(job.model_field, endpoint)

    async def discard(_: str) -> None:
        return None

    try:
        with engine.log.tracking(record):
            return await run_job(engine, job, record, sink or discard)
    except ServerBusy as exc:
        return openai_error(str(exc), 503)
    except ConnectionResetError:
        return stream.response if stream is not None else web.Response(status=499)


def _completion(model: str, prefix: str) -> oai.Completion:
    # Ollama's ids are short and not unique: "chatcmpl-" + rand.Intn(999).
    completion_id = f"{prefix}-{random.randrange(999)}"
    return oai.Completion(oai.OLLAMA, completion_id, int(time.time()), model)


async def embeddings(request: web.Request) -> web.Response:
    """``POST /v1/embeddings`` with ``encoding_format`` float or base64."""
    try:
        body = await _body(request)
    except RequestError as exc:
        return openai_error(str(exc), 400)
    encoding = str(body.get("encoding_format") or "")
    if encoding and encoding.lower() not in ("float", "base64"):
        message = (
            f"Invalid value for 'encoding_format' = {encoding}. "
            "Supported values: ['float', 'base64']."
        )
        return openai_error(message, 400)
    texts = _embedding_texts(body.get("input"))
    if isinstance(texts, web.Response):
        return texts
    model = str(body.get("model") or "")
    engine = engine_of(request)
    spec = engine.find(model) if model else None
    if spec is None:
        return openai_error(f"model '{model}' not found", 404)
    try:
        await run_embedding(engine, spec, model, "/v1/embeddings", texts, None)
    except ServerBusy as exc:
        return openai_error(str(exc), 503)
    vectors = [_encode(embedding(text, spec.embedding_length), encoding) for text in texts]
    data = [
        {"object": "embedding", "embedding": vector, "index": index}
        for index, vector in enumerate(vectors)
    ]
    tokens = sum(count_tokens(text) for text in texts)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return openai_json({"object": "list", "data": data, "model": model, "usage": usage})


def _embedding_texts(inputs: object) -> list[str] | web.Response:
    """``input`` as Ollama's middleware checks it: ``""`` is one empty text, nothing is 400."""
    if inputs == "":
        inputs = [""]
    if inputs is None or inputs == []:
        return openai_error("invalid input", 400)
    texts = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        return openai_error("invalid input type", 400)
    return [str(text) for text in texts]


def _encode(vector: list[float], encoding: str) -> list[float] | str:
    if encoding.lower() != "base64":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
