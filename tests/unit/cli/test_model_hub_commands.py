"""``pair model search`` and ``pair model files`` against a scripted broker: the repositories
found, a repository's files with the one suggested for this computer's memory, and the exact
pull command to run."""

from __future__ import annotations

import io
import sys

import pytest

from backend.cli import exit_codes
from backend.cli.main import main
from backend.protocol import errors, methods
from backend.protocol.types.base import NodeId
from backend.protocol.types.broker import Ports
from backend.protocol.types.hub import HubFile, HubFiles, HubModel, HubModels
from backend.protocol.types.nodes import NodeCpu, NodeInfo, NodeMemory, NodeOs
from tests.unit.cli.scripted import StreamingBroker

REPO = "Qwen/Qwen2.5-0.5B-Instruct-GGUF"
BASE = f"https://huggingface.co/{REPO}/resolve/main"


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> StreamingBroker:
    broker = StreamingBroker()
    broker.attach(monkeypatch)
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    broker.answer(
        methods.NODEINFO_GET.name,
        NodeInfo(
            node_id=NodeId("a" * 32),
            name="alice",
            version="0.1",
            os=NodeOs(),
            cpu=NodeCpu(),
            memory=NodeMemory(total_bytes=16_000_000_000),
            gpus=[],
            telemetry_valid=True,
            ports=Ports(node=14320, ollama=11434, openai=1234, llamacpp=8080),
        ),
    )
    return broker


def _file(name: str, size: int, quant: str, parts: int = 1) -> HubFile:
    return HubFile(name=name, size=size, quant=quant, url=f"{BASE}/{name}", parts=parts)


FILES = HubFiles(
    repo=REPO,
    files=[
        _file("q-q4_k_m.gguf", 491_400_032, "Q4_K_M"),
        _file("q-q8_0.gguf", 676_304_864, "Q8_0"),
        _file("q-f16-00001-of-00002.gguf", 1_270_000_000, "F16", parts=2),
    ],
    suggested="q-q8_0.gguf",
    reason="Q8_0 (0.7 GB) is the largest that fits in 80% of 16.0 GB of memory, leaving the "
    "rest for the context",
)


def test_search_lists_repositories_and_names_the_next_command(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    found = [
        HubModel(repo=REPO, downloads=86211, likes=117, updated="2024-09-17T14:08:42.000Z"),
        HubModel(repo="bartowski/Llama-3.2-1B-Instruct-GGUF", downloads=152034, likes=141),
    ]
    broker.answer(methods.HUB_SEARCH.name, HubModels(models=found))
    assert main(["model", "search", "qwen", "0.5b", "--limit", "5"]) == exit_codes.OK
    assert broker.calls == [(methods.HUB_SEARCH.name, {"query": "qwen 0.5b", "limit": 5})]
    assert capsys.readouterr().out.splitlines() == [
        f"{'REPOSITORY':<40}DOWNLOADS  LIKES  UPDATED",
        f"{REPO:<40}86,211     117    2024-09-17",
        f"{'bartowski/Llama-3.2-1B-Instruct-GGUF':<40}152,034    141",
        "",
        "See a repository's files and the one that fits this computer:",
        f"  pair model files {REPO}",
    ]


def test_a_search_that_finds_nothing_says_so(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.answer(methods.HUB_SEARCH.name, HubModels(models=[]))
    assert main(["model", "search", "zzz"]) == exit_codes.OK
    assert capsys.readouterr().out == (
        "no GGUF model on Hugging Face matches 'zzz'; try fewer or other words\n"
    )


def test_files_marks_the_suggestion_for_this_computers_memory_and_prints_the_pull_command(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.answer(methods.HUB_FILES.name, FILES)
    assert main(["model", "files", REPO]) == exit_codes.OK
    assert broker.calls[-1] == (
        methods.HUB_FILES.name,
        {"repo": REPO, "memory_bytes": 16_000_000_000},
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["FILE", "QUANT", "SIZE"]
    assert lines[2].split() == ["q-q8_0.gguf", "Q8_0", "676.3", "MB", "<-", "suggested"]
    assert lines[3].endswith("split in 2 files (cannot be pulled yet)")
    assert lines[-4:] == [
        "Suggested for this computer (16.0 GB of memory): q-q8_0.gguf",
        "  Q8_0 (0.7 GB) is the largest that fits in 80% of 16.0 GB of memory, leaving the rest "
        "for the context.",
        "Pull it into llama.cpp with:",
        f"  pair model pull llamacpp {BASE}/q-q8_0.gguf",
    ]


def test_files_for_a_given_memory_size_asks_nothing_of_this_computer(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    none_fits = HubFiles(repo=REPO, files=FILES.files[:1], reason="none fits in 0.5 GB")
    broker.answer(methods.HUB_FILES.name, none_fits)
    assert main(["model", "files", REPO, "--memory", "0.5"]) == exit_codes.OK
    assert broker.calls == [
        (methods.HUB_FILES.name, {"repo": REPO, "memory_bytes": 500_000_000}),
    ]
    out = capsys.readouterr().out
    assert "No suggestion for this computer (500.0 MB of memory): none fits in 0.5 GB." in out
    assert out.endswith(f"Pull a file with: pair model pull llamacpp {BASE}/q-q4_k_m.gguf\n")


def test_a_refusal_from_the_service_is_printed_plainly(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.answer(methods.HUB_FILES.name, errors.InvalidParams("'x' is not a Hugging Face repo"))
    assert main(["model", "files", "x", "--memory", "8"]) != exit_codes.OK
    err = capsys.readouterr().err
    assert "'x' is not a Hugging Face repo" in err and "InvalidParams" not in err
