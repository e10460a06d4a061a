"""``pair model pull ENGINE NAME|URL`` (or a name with ``--url`` and ``--sha256``; ``pair pull``
and ``--engine`` alike) against a scripted broker, drawing the progress of the name the model is
saved under; and ``pair models`` as a table with a header and the computer, showing what a model
store's files say (size, architecture, quantization, trained context)."""

from __future__ import annotations

import io
import sys
from typing import Any

import pytest

from backend.cli import exit_codes, model_commands
from backend.cli.engine_format import describe_model_facts, describe_size
from backend.cli.main import main
from backend.protocol import methods
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import (
    EngineActionResult,
    EngineModels,
    ModelDetails,
    PullProgress,
    PullProgressed,
)
from tests.unit.cli.scripted import StreamingBroker

LLAMACPP = EngineName("llamacpp")
URL = "https://example.com/files/Qwen2.5-0.5B-Instruct-Q4_K_M.gguf"
SHA256 = "ab" * 32


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> StreamingBroker:
    broker = StreamingBroker()
    broker.attach(monkeypatch)
    broker.answer(methods.ENGINE_ACTION.name, EngineActionResult(ok=True))
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    return broker


def _sent(broker: StreamingBroker) -> list[Any]:
    return [params for method, params in broker.calls if method == methods.ENGINE_ACTION.name]


def _progress(model: str, percent: float, *, done: bool = False) -> PullProgressed:
    progress = PullProgress(
        engine=LLAMACPP, model=model, stage="downloading", percent=percent, done=done
    )
    return PullProgressed(seq=1, progress=progress)


@pytest.mark.parametrize(
    ("argv", "sent", "name"),
    [
        (
            ["llamacpp", URL],
            {"engine": "llamacpp", "action": "pull_model", "model": URL},
            "Qwen2.5-0.5B-Instruct-Q4_K_M",
        ),
        (
            ["llamacpp", "qwen", "--url", URL],
            {"engine": "llamacpp", "action": "pull_model", "model": "qwen", "url": URL},
            "qwen",
        ),
        (
            ["ollama", "phi3:mini"],
            {"engine": "ollama", "action": "pull_model", "model": "phi3:mini"},
            "phi3:mini",
        ),
        (
            ["--engine", "llamacpp", URL],
            {"engine": "llamacpp", "action": "pull_model", "model": URL},
            "Qwen2.5-0.5B-Instruct-Q4_K_M",
        ),
        (
            ["qwen", "--engine", "llamacpp", "--url", URL, "--sha256", SHA256],
            {
                "engine": "llamacpp",
                "action": "pull_model",
                "model": "qwen",
                "url": URL,
                "sha256": SHA256,
            },
            "qwen",
        ),
        (
            ["--engine", "llamacpp", "--url", URL],
            {"engine": "llamacpp", "action": "pull_model", "url": URL},
            "Qwen2.5-0.5B-Instruct-Q4_K_M",
        ),
        (
            ["phi3:mini", "--engine", "ollama"],
            {"engine": "ollama", "action": "pull_model", "model": "phi3:mini"},
            "phi3:mini",
        ),
    ],
)
def test_model_pull_sends_what_was_given_and_follows_the_saved_name(
    broker: StreamingBroker,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    sent: dict[str, Any],
    name: str,
) -> None:
    engine = sent["engine"]
    broker.pushes[methods.ENGINE_ACTION.name] = [
        _progress("someone-else", 50.0),
        _progress(name, 100.0, done=True),
    ]
    assert main(["model", "pull", *argv]) == exit_codes.OK
    assert _sent(broker) == [sent]
    out = capsys.readouterr().out
    if engine == "llamacpp":
        assert "100.0%" in out and "50.0%" not in out, "only this pull's progress is drawn"
    assert out.endswith(f"{name} is ready in {engine}\n")


def test_pair_pull_is_the_same_command_and_names_the_model_a_url_becomes(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.pushes[methods.ENGINE_ACTION.name] = [_progress("Qwen2.5-0.5B-Instruct-Q4_K_M", 100)]
    assert main(["pull", "llamacpp", URL]) == exit_codes.OK
    assert _sent(broker) == [{"engine": "llamacpp", "action": "pull_model", "model": URL}]
    assert capsys.readouterr().out.endswith("Qwen2.5-0.5B-Instruct-Q4_K_M is ready in llamacpp\n")


def test_model_pull_with_nothing_to_pull_or_an_unnamable_url_is_refused(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["llamacpp"], ["--engine", "llamacpp"], [], ["llamacpp", "a", "b"]):
        assert main(["model", "pull", *argv]) == exit_codes.USAGE
        err = capsys.readouterr().err
        assert err == (
            "pair: give the engine and the model's name or the URL of its file: "
            "`pair model pull ENGINE NAME|URL`\n"
        )
    assert main(["model", "pull", "llamacpp", "https://example.com/"]) == 2
    assert "give the model a name" in capsys.readouterr().err
    assert _sent(broker) == []


def test_model_pull_of_a_url_alone_asks_for_the_engine_first(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["model", "pull", URL]) == exit_codes.USAGE
    assert "`pair model pull ENGINE NAME|URL`" in capsys.readouterr().err


async def test_models_shows_what_a_stores_files_say(capsys: pytest.CaptureFixture[str]) -> None:
    broker = StreamingBroker()
    details = ModelDetails(
        file="qwen.gguf", architecture="qwen2", quantization="Q4_K_M", context_length=32768
    )
    broker.answer(
        methods.ENGINE_MODELS.name,
        EngineModels(
            models=["phi3:mini", "qwen", "tiny"],
            by_engine={LLAMACPP: ["qwen", "tiny"], EngineName("ollama"): ["phi3:mini"]},
            loaded_by_engine={LLAMACPP: ["qwen"]},
            slots_by_engine={LLAMACPP: {"qwen": 2}},
            sizes_by_engine={
                LLAMACPP: {"qwen": 491_400_032},
                EngineName("ollama"): {"phi3:mini": 9},
            },
            details_by_engine={LLAMACPP: {"qwen": details, "tiny": ModelDetails(file="t.gguf")}},
        ),
    )
    broker.answer(methods.ENGINE_LIST.name, [])  # no engine runs a model spread over members
    assert await model_commands.list_models(broker.peer, None) == exit_codes.OK
    facts = "491.4 MB  qwen2  Q4_K_M  trained ctx 32768"
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"{'COMPUTER':<15}{'ENGINE':<10}{'MODEL':<24}{'FILE':<{len(facts) + 2}}STATE",
        f"{'this computer':<15}{'llamacpp':<10}{'qwen':<24}{facts}  loaded, 2 slots",
        f"{'this computer':<15}{'llamacpp':<10}tiny",
        f"{'this computer':<15}{'ollama':<10}phi3:mini",  # an engine that reads no files
    ]


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (999, "999 B"), (1500, "1.5 kB"), (496_736, "496.7 kB"), (4.1e9, "4.1 GB")],
)
def test_sizes_read_as_people_read_them(size: float, text: str) -> None:
    assert describe_size(int(size)) == text
    assert describe_model_facts(None, int(size)) == ""
