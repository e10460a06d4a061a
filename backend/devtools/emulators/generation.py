"""The emulators' timing model: load delay, prompt processing, one token per token delay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from backend.core.clock import Clock
from backend.devtools.emulators.scheduling import RequestLog, RequestRecord
from backend.devtools.emulators.tokens import Reply


@dataclass(frozen=True)
class TimingModel:
    """How long an emulated engine takes: seconds per load, per prompt token, per new token."""

    load_delay: float = 0.0
    token_delay: float = 0.0
    prompt_token_delay: float = 0.0


@dataclass
class Metrics:
    """What the engine reports about one generation (durations in nanoseconds)."""

    prompt_eval_count: int = 0
    prompt_eval_ns: int = 0
    eval_count: int = 0
    eval_ns: int = 0


def nanoseconds(clock: Clock) -> int:
    """The clock's monotonic time in integer nanoseconds."""
    return int(clock.monotonic() * 1_000_000_000)


async def process_prompt(clock: Clock, seconds: float, *, finish_on_cancel: bool = False) -> None:
    """Wait out prompt processing; with ``finish_on_cancel`` a cancel only lands afterwards.

    LM Studio cannot interrupt prompt processing ("If the model is busy processing the prompt,
    it will finish first"), Ollama can.
    """
    deadline = clock.monotonic() + seconds
    try:
        await clock.sleep(seconds)
    except asyncio.CancelledError:
        remaining = deadline - clock.monotonic()
        if finish_on_cancel and remaining > 0:
            await clock.sleep(remaining)
        raise


async def paced_tokens(
    reply: Reply,
    *,
    prompt_tokens: int,
    timing: TimingModel,
    clock: Clock,
    log: RequestLog,
    record: RequestRecord,
    metrics: Metrics,
    finish_prompt_on_cancel: bool = False,
) -> AsyncIterator[str]:
    """Yield ``reply``'s tokens one per ``token_delay`` after the prompt delay, filling metrics."""
    started = nanoseconds(clock)
    await process_prompt(
        clock, prompt_tokens * timing.prompt_token_delay, finish_on_cancel=finish_prompt_on_cancel
    )
    metrics.prompt_eval_count = max(1, prompt_tokens)
    metrics.prompt_eval_ns = max(1, nanoseconds(clock) - started)
    generating = nanoseconds(clock)
    for token in reply.tokens:
        await clock.sleep(timing.token_delay)
        log.token(record)
        metrics.eval_count += 1
        metrics.eval_ns = max(1, nanoseconds(clock) - generating)
        yield token
    metrics.eval_ns = max(1, nanoseconds(clock) - generating)
