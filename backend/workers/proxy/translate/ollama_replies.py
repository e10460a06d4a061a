"""OpenAI answers read back as Ollama's: the wire types, the shared record parts and the
non-streamed answers (``/api/chat``, ``/api/generate``, ``/api/embed``, ``/api/embeddings``)."""

from __future__ import annotations

import functools
import time
from typing import Literal

import msgspec

Endpoint = Literal["chat", "generate", "embed", "embeddings"]

ENCODER = msgspec.json.Encoder()


class AnswerFunction(msgspec.Struct):
    """A tool call's function; a stream sends ``arguments`` in pieces."""

    name: str | None = None
    arguments: str | None = None


class AnswerToolCall(msgspec.Struct):
    """One tool call of an answer (``index`` keys a call's pieces in a stream)."""

    index: int = 0
    id: str | None = None
    function: AnswerFunction | None = None


class AnswerMessage(msgspec.Struct):
    """A non-streamed ``message`` or a streamed ``delta``; llama-server names its reasoning
    ``reasoning_content``, Ollama and LM Studio ``reasoning``."""

    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[AnswerToolCall] | None = None


class AnswerLogprobs(msgspec.Struct):
    """Per-token log probabilities; their shape is Ollama's already, so they pass as raw JSON."""

    content: list[msgspec.Raw] | None = None


class AnswerChoice(msgspec.Struct):
    """The first choice: ``message`` (chat), ``delta`` (chat stream) or ``text`` (completions)."""

    message: AnswerMessage | None = None
    delta: AnswerMessage | None = None
    text: str | None = None
    finish_reason: str | None = None
    logprobs: AnswerLogprobs | None = None


class Usage(msgspec.Struct):
    """Token counts."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


class Timings(msgspec.Struct):
    """llama-server's own measurements of one answer, in milliseconds."""

    prompt_ms: float | None = None
    predicted_ms: float | None = None


class Answer(msgspec.Struct):
    """A chat or completions answer, or one chunk of its stream."""

    choices: list[AnswerChoice] = []
    usage: Usage | None = None
    timings: Timings | None = None
    error: dict[str, object] | str | None = None


class Embedding(msgspec.Struct):
    """One vector, kept as raw JSON: it goes out as it came, unparsed."""

    embedding: msgspec.Raw
    index: int = 0


class EmbeddingAnswer(msgspec.Struct):
    """An ``/v1/embeddings`` answer."""

    data: list[Embedding] = []
    usage: Usage | None = None


class EngineAnswerInvalid(ValueError):
    """The engine's answer is not an OpenAI answer this translation can read."""


def created_at(ns: int) -> str:
    """``ns`` (Unix nanoseconds) as Go's RFC3339Nano in UTC, the way Ollama writes it."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    stamp = _utc_second(seconds)
    digits = f"{fraction:09d}".rstrip("0")
    return f"{stamp}.{digits}Z" if digits else f"{stamp}Z"


@functools.lru_cache(maxsize=4)
def _utc_second(seconds: int) -> str:
    # A stream stamps many records within one second: formatting it once halves a record's cost.
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def done_reason(finish_reason: str | None) -> str:
    """Ollama's ``done_reason`` for an OpenAI ``finish_reason`` (Ollama says "stop" after
    tool calls)."""
    return "length" if finish_reason == "length" else "stop"


def metrics(
    usage: Usage | None, timings: Timings | None, started_ns: int, now: int
) -> dict[str, object]:
    """Ollama's counts and durations (ns): counts from ``usage``; durations from llama-server's
    ``timings`` where it sends them, else only the total as measured here."""
    prompt_ns = eval_ns = 0
    if timings is not None:
        prompt_ns = round((timings.prompt_ms or 0.0) * 1_000_000)
        eval_ns = round((timings.predicted_ms or 0.0) * 1_000_000)
    return {
        "total_duration": max(now - started_ns, prompt_ns + eval_ns),
        "load_duration": 0,
        "prompt_eval_count": usage.prompt_tokens if usage is not None else 0,
        "prompt_eval_duration": prompt_ns,
        "eval_count": usage.completion_tokens if usage is not None else 0,
        "eval_duration": eval_ns,
    }


def tool_call_record(call_id: str | None, name: str, arguments: str) -> dict[str, object]:
    """One Ollama tool call: arguments are an object there, a JSON string in OpenAI's API."""
    try:
        parsed = msgspec.json.decode(arguments or "{}")
    except msgspec.DecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise EngineAnswerInvalid(f"the arguments of the tool call {name!r} are not a JSON object")
    function: dict[str, object] = {"name": name, "arguments": parsed}
    return {"id": call_id, "function": function} if call_id else {"function": function}


def thinking_of(message: AnswerMessage) -> str | None:
    """The reasoning text of a message or delta, whichever name the engine uses."""
    return message.reasoning_content or message.reasoning


def whole_answer(endpoint: Endpoint, model: str, body: bytes, started_ns: int, now: int) -> bytes:
    """The Ollama body for the engine's non-streamed OpenAI body."""
    try:
        if endpoint == "embed" or endpoint == "embeddings":
            vectors = msgspec.json.decode(body, type=EmbeddingAnswer)
            return ENCODER.encode(_embeddings(endpoint, model, vectors, started_ns, now))
        answer = msgspec.json.decode(body, type=Answer)
    except msgspec.MsgspecError as error:
        raise EngineAnswerInvalid(
            f"the engine's answer is not an OpenAI answer: {error}"
        ) from error
    return ENCODER.encode(_generated(endpoint, model, answer, started_ns, now))


def _generated(
    endpoint: Endpoint, model: str, answer: Answer, started_ns: int, now: int
) -> dict[str, object]:
    choice = answer.choices[0] if answer.choices else AnswerChoice()
    message = choice.message or AnswerMessage(content=choice.text)
    thinking = thinking_of(message)
    record: dict[str, object] = {"model": model, "created_at": created_at(now)}
    if endpoint == "chat":
        out: dict[str, object] = {"role": "assistant", "content": message.content or ""}
        if thinking:
            out["thinking"] = thinking
        if message.tool_calls:
            out["tool_calls"] = [_whole_tool_call(call) for call in message.tool_calls]
        record["message"] = out
    else:
        record["response"] = message.content or ""
        if thinking:
            record["thinking"] = thinking
    if choice.logprobs is not None and choice.logprobs.content:
        record["logprobs"] = choice.logprobs.content
    record["done"] = True
    record["done_reason"] = done_reason(choice.finish_reason)
    record.update(metrics(answer.usage, answer.timings, started_ns, now))
    return record


def _whole_tool_call(call: AnswerToolCall) -> dict[str, object]:
    function = call.function or AnswerFunction()
    return tool_call_record(call.id, function.name or "", function.arguments or "")


def _embeddings(
    endpoint: Endpoint, model: str, answer: EmbeddingAnswer, started_ns: int, now: int
) -> dict[str, object]:
    vectors = [item.embedding for item in sorted(answer.data, key=lambda item: item.index)]
    if endpoint == "embeddings":
        return {"embedding": vectors[0] if vectors else []}
    return {
        "model": model,
        "embeddings": vectors,
        "total_duration": now - started_ns,
        "load_duration": 0,
        "prompt_eval_count": answer.usage.prompt_tokens if answer.usage is not None else 0,
    }
