"""One generation on the Ollama emulator, shared by the native API and its ``/v1`` layer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from backend.devtools.emulators.catalog import ModelSpec
from backend.devtools.emulators.durations import DurationError, keep_alive_ns
from backend.devtools.emulators.generation import Metrics, nanoseconds, paced_tokens
from backend.devtools.emulators.ollama_state import OllamaEngine
from backend.devtools.emulators.options import GenerationOptions, RequestError
from backend.devtools.emulators.scheduling import RequestRecord
from backend.devtools.emulators.tokens import (
    Reply,
    count_tokens,
    natural_length,
    plan_reply,
    reply_seed,
)

TokenSink = Callable[[str], Awaitable[None]]
# The chat template's own tokens around each message (role headers, end markers).
TEMPLATE_TOKENS_PER_MESSAGE = 4


class Job(msgspec.Struct, frozen=True):
    """What to generate: for which model (as the client named it), from what, with what limits."""

    model_field: str
    spec: ModelSpec
    prompt: str
    prompt_tokens: int
    options: GenerationOptions
    keep_alive_ns: int | None


class Outcome(msgspec.Struct, frozen=True):
    """A finished generation and the durations Ollama reports for it (nanoseconds)."""

    reply: Reply
    metrics: Metrics
    load_ns: int
    total_ns: int

    def metric_fields(self) -> dict[str, int]:
        """The six ``omitempty`` metrics of a final chunk, in Ollama's order."""
        return {
            "total_duration": self.total_ns,
            "load_duration": self.load_ns,
            "prompt_eval_count": self.metrics.prompt_eval_count,
            "prompt_eval_duration": self.metrics.prompt_eval_ns,
            "eval_count": self.metrics.eval_count,
            "eval_duration": self.metrics.eval_ns,
        }


def parse_keep_alive(body: dict[str, Any]) -> int | None:
    """``keep_alive`` in nanoseconds (None when absent or null); 400 on a bad value."""
    if body.get("keep_alive") is None:
        return None
    try:
        return keep_alive_ns(body["keep_alive"])
    except DurationError as exc:
        raise RequestError(str(exc)) from None


def chat_prompt(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """The rendered chat prompt and its token count (contents plus template tokens)."""
    text = "\n".join(f"{message['role']}: {message['content']}" for message in messages)
    tokens = sum(
        count_tokens(str(message["content"])) + TEMPLATE_TOKENS_PER_MESSAGE for message in messages
    )
    return text, tokens


def parse_messages(raw: object) -> list[dict[str, Any]]:
    """``messages`` as a list of ``{role, content}`` objects (Go's bind errors otherwise)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RequestError("json: cannot unmarshal messages into Go struct field of type []Message")
    messages = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("content", ""), str):
            raise RequestError("json: cannot unmarshal message into Go value of type api.Message")
        messages.append({"role": str(item.get("role", "")), "content": item.get("content", "")})
    return messages


async def run_job(
    engine: OllamaEngine, job: Job, record: RequestRecord, on_token: TokenSink
) -> Outcome:
    """Load (if needed), wait for a slot, then generate token by token into ``on_token``."""
    started = nanoseconds(engine.clock)
    scheduler = engine.scheduler
    async with scheduler.using(job.spec, job.options.num_ctx, job.keep_alive_ns) as runner:
        loaded = nanoseconds(engine.clock)
        async with runner.slots.slot():
            engine.log.started(record, runner.spec.name)
            reply = plan(engine, job)
            metrics = Metrics()
            tokens = paced_tokens(
                reply,
                prompt_tokens=job.prompt_tokens,
                timing=engine.config.timing.for_model(runner.spec.name),
                clock=engine.clock,
                log=engine.log,
                record=record,
                metrics=metrics,
            )
            async for token in tokens:
                await on_token(token)
            # Finished while still holding the slot: the next request in line starts after.
            engine.log.generated(record)
    total = nanoseconds(engine.clock) - started
    return Outcome(reply, metrics, load_ns=max(1, loaded - started), total_ns=max(1, total))


def plan(engine: OllamaEngine, job: Job) -> Reply:
    """The deterministic reply for ``job``."""
    seed = reply_seed(job.spec.name, job.prompt, job.options.seed)
    return plan_reply(
        seed,
        natural_tokens=natural_length(seed, engine.config.reply_tokens),
        num_predict=job.options.num_predict,
        stop=job.options.stop,
    )
