"""Per-model speeds of the emulators: parsing the option, timing per model, slots and loads."""

from __future__ import annotations

import pytest

from backend.devtools.emulators.catalog import spec_for
from backend.devtools.emulators.generation import ModelPace, TimingModel, parse_model_pace
from backend.devtools.emulators.ollama_scheduler import OllamaLimits, OllamaScheduler
from tests.fakes import FakeClock


def test_a_model_pace_names_speed_slots_load_and_first_token() -> None:
    assert parse_model_pace("llama3.2=60:4:2.5:0.1") == (
        "llama3.2",
        ModelPace(tokens_per_s=60.0, slots=4, load_s=2.5, first_token_s=0.1),
    )
    assert parse_model_pace("m=12") == ("m", ModelPace(tokens_per_s=12.0))
    assert parse_model_pace("m=::7") == ("m", ModelPace(load_s=7.0))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("60:4", "expected MODEL="),
        ("=60", "expected MODEL="),
        ("m=fast", "'fast' is not a number"),
        ("m=0", "more than 0"),
        ("m=10:0", "at least 1"),
        ("m=10:1.5", "whole number"),
        ("m=10:1:-1", "must not be negative"),
        ("m=1:2:3:4:5", "at most four"),
        ("m=inf", "finite"),
    ],
)
def test_a_bad_model_pace_says_what_is_wrong(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_model_pace(text)


def test_a_models_figures_override_the_engines() -> None:
    timing = TimingModel(
        load_delay=1.0,
        token_delay=0.05,
        models={"fast": ModelPace(tokens_per_s=100.0, load_s=3.0, first_token_s=0.2, slots=4)},
    )
    fast = timing.for_model("fast:latest")
    assert (fast.token_delay, fast.load_delay, fast.first_token_delay) == (0.01, 3.0, 0.2)
    other = timing.for_model("other")
    assert (other.token_delay, other.load_delay, other.first_token_delay) == (0.05, 1.0, 0.0)
    assert timing.slots_for("FAST", 1) == 4
    assert timing.slots_for("other", 2) == 2


async def test_the_ollama_emulator_loads_and_runs_each_model_at_its_own_figures() -> None:
    clock = FakeClock()
    timing = TimingModel(load_delay=1.0, models={"big": ModelPace(slots=3, load_s=8.0)})
    scheduler = OllamaScheduler(clock=clock, timing=timing, limits=OllamaLimits(parallel=1))
    async with scheduler.using(spec_for("big:latest", 0), None, None) as runner:
        assert runner.slots.capacity == 3
    async with scheduler.using(spec_for("small:latest", 0), None, None) as runner:
        assert runner.slots.capacity == 1
    assert clock.sleeps == [8.0, 1.0]
