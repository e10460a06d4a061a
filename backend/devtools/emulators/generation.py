"""The emulators' timing model: load delay, prompt processing, one token per token delay,
with figures of their own per model (speed, slots, load time, first token)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Mapping

import msgspec

from backend.core.clock import Clock
from backend.devtools.emulators.scheduling import RequestLog, RequestRecord
from backend.devtools.emulators.tokens import Reply


class ModelPace(msgspec.Struct, frozen=True):
    """One model's own figures, overriding the engine's (None: the engine's): generation speed,
    slots (requests it runs at once), load time and a fixed delay before its first token."""

    tokens_per_s: float | None = None
    slots: int | None = None
    load_s: float | None = None
    first_token_s: float | None = None


class TimingModel(msgspec.Struct, frozen=True):
    """How long an emulated engine takes: seconds per load, per prompt token, per new token,
    before the first token; ``models`` overrides them per model (by name, ``:latest`` implied).
    """

    load_delay: float = 0.0
    token_delay: float = 0.0
    prompt_token_delay: float = 0.0
    first_token_delay: float = 0.0
    models: Mapping[str, ModelPace] = msgspec.field(default_factory=dict)

    def pace_of(self, model: str) -> ModelPace:
        """The overrides for ``model`` (none: every field None)."""
        wanted = {model.lower(), model.lower().removesuffix(":latest")}
        for name, pace in self.models.items():
            if name.lower() in wanted or f"{name.lower()}:latest" in wanted:
                return pace
        return ModelPace()

    def for_model(self, model: str) -> TimingModel:
        """This timing with ``model``'s overrides applied."""
        pace = self.pace_of(model)
        return TimingModel(
            load_delay=self.load_delay if pace.load_s is None else pace.load_s,
            token_delay=self.token_delay if not pace.tokens_per_s else 1.0 / pace.tokens_per_s,
            prompt_token_delay=self.prompt_token_delay,
            first_token_delay=(
                self.first_token_delay if pace.first_token_s is None else pace.first_token_s
            ),
        )

    def slots_for(self, model: str, default: int) -> int:
        """How many requests ``model`` runs at once (``default``: the engine's setting)."""
        slots = self.pace_of(model).slots
        return default if slots is None else slots


def parse_model_pace(text: str) -> tuple[str, ModelPace]:
    """``MODEL=TOKENS_PER_S:SLOTS:LOAD_S:FIRST_TOKEN_S`` (trailing or empty fields: the
    engine's); raises ValueError saying what is wrong."""
    name, sep, figures = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"{text!r}: expected MODEL=TOKENS_PER_S:SLOTS:LOAD_S:FIRST_TOKEN_S")
    parts = figures.split(":")
    if len(parts) > 4:
        raise ValueError(f"{text!r}: at most four figures after '='")
    parts += [""] * (4 - len(parts))
    speed, slots, load, first = (_figure(text, part) for part in parts)
    if speed is not None and speed <= 0:
        raise ValueError(f"{text!r}: tokens per second must be more than 0")
    if slots is not None and (slots < 1 or slots != int(slots)):
        raise ValueError(f"{text!r}: slots must be a whole number of at least 1")
    for value in (load, first):
        if value is not None and value < 0:
            raise ValueError(f"{text!r}: seconds must not be negative")
    return name.strip(), ModelPace(speed, None if slots is None else int(slots), load, first)


def _figure(text: str, part: str) -> float | None:
    if not part.strip():
        return None
    try:
        value = float(part)
    except ValueError:
        raise ValueError(f"{text!r}: {part!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r}: {part!r} is not a finite number")
    return value


class Metrics(msgspec.Struct):
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
    if timing.first_token_delay > 0:
        await clock.sleep(timing.first_token_delay)
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
