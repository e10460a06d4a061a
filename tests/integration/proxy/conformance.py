"""What the engine-apis.md §6 conformance tests stand on: a proxy served for a whole module, the
engines behind its doors (Ollama and LM Studio emulators, a real llama-server), the ``Door``
handles the tests talk through, and the NDJSON and SSE parsers that check the framing.

Each test module opens its doors in module-scoped fixtures of its own with the context managers
here (one proxy and one emulator per module keeps the suites fast).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
from aiohttp import web
from openai.types.chat import ChatCompletionMessageParam

from backend.components.proxy.component import ProxyComponent
from backend.core.clock import SystemClock
from backend.core.supervisor import Supervisor
from backend.devtools.emulators.generation import TimingModel
from backend.devtools.emulators.lmstudio import build_lmstudio_app
from backend.devtools.emulators.lmstudio_state import LmStudioConfig
from backend.devtools.emulators.ollama import build_ollama_app
from backend.devtools.emulators.ollama_state import OllamaConfig
from backend.devtools.emulators.server import EmulatorServer
from backend.protocol.proxy import ProxyTargets, RouteTarget
from backend.workers.proxy.service import BACKOFF_ENV
from tests.fakes import RecordingErrors
from tests.integration.proxy.conftest import (
    LOCAL_NODE,
    QUICK_RESTARTS,
    RunningProxy,
    credentials_for,
    free_ports,
    local,
)

if TYPE_CHECKING:
    # Annotations only: pytest must import the fixtures module first, as a plugin.
    from tests.engines.fixtures import LlamaServer

REPLY_TOKENS = 12  # the fast emulators' reply length
SLOW_TOKEN_DELAY = 0.05  # the slow emulators' delay per token (400 tokens unless capped)


@contextlib.asynccontextmanager
async def serving_proxy(**engines: RouteTarget) -> AsyncIterator[RunningProxy]:
    """A supervised proxy as ``start_proxy`` makes it, but usable for a whole module."""
    errors = RecordingErrors()
    clock = SystemClock()
    proxy = RunningProxy(
        component=ProxyComponent(
            ports=free_ports(),
            errors=errors,
            clock=clock,
            targets=lambda: proxy.targets,
            credentials=credentials_for(LOCAL_NODE),
            on_job=lambda event: proxy.jobs.append(event),
            # Engine 5xx answers are retried after a backoff: keep it short, as start_proxy does.
            environment=lambda: {BACKOFF_ENV: "0.05,0.1"},
            host="127.0.0.1",
            targets_interval=0.05,
        ),
        supervisor=Supervisor(errors=errors, clock=clock, policy=QUICK_RESTARTS),
        errors=errors,
        targets=ProxyTargets(node_id=LOCAL_NODE, engines={n: [t] for n, t in engines.items()}),
    )
    proxy.supervisor.add(proxy.component)
    proxy.supervisor.start()
    try:
        await proxy.wait_serving()
        yield proxy
    finally:
        await proxy.component.close_front_doors()
        await proxy.supervisor.stop(grace=5.0)


async def emulator_state(engine_url: str) -> dict[str, Any]:
    """An emulator's ``/_emulator/state`` (asked directly, not through the door)."""
    async with httpx.AsyncClient(base_url=engine_url) as client:
        return (await client.get("/_emulator/state")).json()  # type: ignore[no-any-return]


# The Ollama door -------------------------------------------------------------------------------

# Installed on the emulator; phi3 is left out of the door's inventory (pass-through paths only).
INSTALLED = ("llama3.2", "qwen2.5", "mistral", "phi3")
KNOWN = ["llama3.2:latest", "qwen2.5:latest", "mistral:latest"]
METRICS = (
    "total_duration",
    "load_duration",
    "prompt_eval_count",
    "prompt_eval_duration",
    "eval_count",
    "eval_duration",
)
PROMPT: dict[str, Any] = {"model": "llama3.2", "prompt": "Why is the sky blue?"}
CHAT: dict[str, Any] = {
    "model": "llama3.2",
    "messages": [{"role": "user", "content": "Why is the sky blue?"}],
}
BODIES: dict[str, dict[str, Any]] = {"/api/generate": PROMPT, "/api/chat": CHAT}
HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")
both_endpoints = pytest.mark.parametrize("path", ["/api/generate", "/api/chat"])


@dataclass(frozen=True)
class OllamaDoor:
    """An Ollama front door and the engine (emulator) behind it."""

    url: str
    engine_url: str

    def client(self, timeout: float = 10.0) -> httpx.AsyncClient:
        """A raw HTTP client on the door."""
        return httpx.AsyncClient(base_url=self.url, timeout=timeout)

    async def engine_state(self) -> dict[str, Any]:
        """The emulator's ``/_emulator/state`` (asked directly, not through the door)."""
        return await emulator_state(self.engine_url)


@contextlib.asynccontextmanager
async def ollama_behind_door(config: OllamaConfig, known: list[str]) -> AsyncIterator[OllamaDoor]:
    """An Ollama emulator with ``config`` behind a fresh proxy's Ollama door."""
    server = EmulatorServer(build_ollama_app(config))
    await server.start()
    try:
        async with serving_proxy(ollama=local(server.url, known)) as proxy:
            yield OllamaDoor(proxy.url("ollama"), server.url)
    finally:
        await server.stop()


def fast_ollama_behind_door() -> contextlib.AbstractAsyncContextManager[OllamaDoor]:
    """A fast emulator (a few ms per reply) behind the door; 0.25 s per pull."""
    timing = TimingModel(load_delay=0.005, token_delay=0.001)
    config = OllamaConfig(
        models=INSTALLED, timing=timing, reply_tokens=REPLY_TOKENS, pull_seconds=0.25
    )
    return ollama_behind_door(config, KNOWN)


def slow_ollama_behind_door() -> contextlib.AbstractAsyncContextManager[OllamaDoor]:
    """An emulator writing one token per ``SLOW_TOKEN_DELAY`` (400 tokens unless capped)."""
    timing = TimingModel(token_delay=SLOW_TOKEN_DELAY)
    config = OllamaConfig(models=("llama3.2",), timing=timing, reply_tokens=400)
    return ollama_behind_door(config, ["llama3.2:latest"])


def ndjson(body: bytes) -> list[dict[str, Any]]:
    """Every line of an NDJSON body, asserting Ollama's framing (§2.2) on the way."""
    assert body.endswith(b"\n"), "every line, the last included, ends in a newline"
    objects = []
    for line in body.split(b"\n")[:-1]:
        assert line.strip(), "no blank lines"
        assert not line.startswith(b"data:"), "no SSE framing"
        value = json.loads(line)
        assert isinstance(value, dict)
        objects.append(value)
    return objects


def rfc3339(text: str) -> datetime:
    """A timestamp Ollama writes (RFC 3339 with up to nanoseconds); it must carry a zone."""
    parsed = datetime.fromisoformat(text)
    assert parsed.tzinfo is not None
    return parsed


async def loaded_names(client: httpx.AsyncClient) -> list[str]:
    """The names ``/api/ps`` lists through the door."""
    return [entry["name"] for entry in (await client.get("/api/ps")).json()["models"]]


async def unload(client: httpx.AsyncClient, name: str) -> None:
    """Unload ``name`` and wait (bounded) until ``/api/ps`` no longer lists it."""
    answer = await client.post("/api/generate", json={"model": name, "keep_alive": 0})
    assert answer.json()["done_reason"] == "unload"
    async with asyncio.timeout(5):
        while name in await loaded_names(client):
            await asyncio.sleep(0.02)


async def pull_lines(door: OllamaDoor, model: str) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """Pull ``model`` through the door (streaming); the response and its NDJSON objects."""
    async with door.client() as client:
        response = await client.post("/api/pull", json={"model": model})
    return response, ndjson(response.content)


# The OpenAI-compatible doors -------------------------------------------------------------------

CHAT_MODEL = "qwen2.5-7b-instruct"
EMBEDDING_MODEL = "text-embedding-nomic-embed-text-v1.5"
LLAMA_ALIAS = "tiny-chat"
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Why is the sky blue?"}]


@dataclass(frozen=True)
class OpenAIDoor:
    """An OpenAI-compatible front door, the engine behind it and the models to ask it for."""

    name: str
    proxy: RunningProxy
    engine_url: str
    chat_model: str
    embedding_model: str

    @property
    def url(self) -> str:
        """The door's URL."""
        return self.proxy.url(self.name)

    def client(self, timeout: float = 10.0) -> httpx.AsyncClient:
        """A raw HTTP client on the door."""
        return httpx.AsyncClient(base_url=self.url, timeout=timeout)

    def openai(self, **options: Any) -> openai.AsyncOpenAI:
        """The official client on the door (no retries: every answer is observed as is)."""
        return openai.AsyncOpenAI(
            base_url=self.url + "/v1", api_key="anything", max_retries=0, **options
        )

    def chat(self, **fields: Any) -> dict[str, Any]:
        """A chat completion body for this door's chat model."""
        return {"model": self.chat_model, "messages": MESSAGES, "max_tokens": 8, **fields}

    async def engine_state(self) -> dict[str, Any]:
        """The emulator's ``/_emulator/state`` (asked directly, not through the door)."""
        return await emulator_state(self.engine_url)


@contextlib.asynccontextmanager
async def lmstudio_behind_door(config: LmStudioConfig) -> AsyncIterator[OpenAIDoor]:
    """An LM Studio emulator with ``config`` behind a fresh proxy's OpenAI door."""
    server = EmulatorServer(build_lmstudio_app(config))
    await server.start()
    try:
        async with serving_proxy(lmstudio=local(server.url, list(config.models))) as proxy:
            yield OpenAIDoor("openai", proxy, server.url, CHAT_MODEL, EMBEDDING_MODEL)
    finally:
        await server.stop()


def fast_lmstudio_behind_door() -> contextlib.AbstractAsyncContextManager[OpenAIDoor]:
    """A fast LM Studio emulator (a chat and an embedding model) behind the OpenAI door."""
    timing = TimingModel(load_delay=0.005, token_delay=0.001)
    config = LmStudioConfig(
        models=(CHAT_MODEL, EMBEDDING_MODEL), timing=timing, reply_tokens=REPLY_TOKENS
    )
    return lmstudio_behind_door(config)


def slow_lmstudio_behind_door() -> contextlib.AbstractAsyncContextManager[OpenAIDoor]:
    """An emulator writing one token per ``SLOW_TOKEN_DELAY`` (400 tokens unless capped)."""
    timing = TimingModel(token_delay=SLOW_TOKEN_DELAY)
    config = LmStudioConfig(models=(CHAT_MODEL,), timing=timing, reply_tokens=400)
    return lmstudio_behind_door(config)


@contextlib.asynccontextmanager
async def llama_server_behind_door(server: LlamaServer) -> AsyncIterator[OpenAIDoor]:
    """The real llama-server behind a fresh proxy's llama.cpp door."""
    target = local(server.base_url, [LLAMA_ALIAS])
    async with serving_proxy(llamacpp=target) as proxy:
        yield OpenAIDoor("llamacpp", proxy, server.base_url, LLAMA_ALIAS, LLAMA_ALIAS)


def launch_healthy_llama_server(
    binary: Path, model: Path, log_dir: Path, **options: Any
) -> LlamaServer:
    """``start_llama_server``'s retry on a lost port race, for fixtures it cannot serve."""
    from tests.engines.fixtures import launch_llama_server, stop_llama_server, wait_until_healthy

    for attempt in range(3):
        server = launch_llama_server(
            binary, model, log_path=log_dir / f"llama-server-{attempt}.log", **options
        )
        if wait_until_healthy(server):
            return server
        stop_llama_server(server)
        if "couldn't bind" not in server.log_tail():
            break
    pytest.fail(f"llama-server did not become healthy:\n{server.log_tail()}", pytrace=False)


def expect_failure_on(
    request: pytest.FixtureRequest, door: OpenAIDoor, name: str, reason: str
) -> None:
    """Mark this test a strict xfail when it runs against door ``name``."""
    if door.name == name:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))


def sse_events(body: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body, asserting OpenAI's framing on the way."""
    assert body.endswith(b"\n\n"), "every event ends with a blank line"
    events = []
    for block in body.decode().split("\n\n")[:-1]:
        assert block.startswith("data: "), f"one data line per event: {block[:80]!r}"
        assert "\n" not in block
        events.append(block[len("data: ") :])
    return events


async def stream_chunks(
    door: OpenAIDoor, **fields: Any
) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """A streamed chat completion: the response and its chunks (``[DONE]`` must end it)."""
    async with door.client() as client:
        response = await client.post("/v1/chat/completions", json=door.chat(stream=True, **fields))
    events = sse_events(response.content)
    assert events[-1] == "[DONE]"
    return response, [json.loads(event) for event in events[:-1]]


def mid_stream_failure_app() -> web.Application:
    """An engine that streams one chat chunk, then an error event and no ``[DONE]`` (§5.5)."""

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        delta = {"role": "assistant", "content": "Hel"}
        chunk = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "faulty",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
        error = {"error": {"code": 500, "message": "the engine crashed", "type": "server_error"}}
        for event in (chunk, error):
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


LOCALHOST_3000 = "http://localhost:3000"


async def check_cors_preflight(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], wanted: list[str]
) -> None:
    """Checklist 6: a preflight from a local web page is allowed, and so is the request."""
    preflight = await client.options(
        path,
        headers={
            "Origin": LOCALHOST_3000,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": ",".join(wanted),
        },
    )
    actual = await client.post(path, json=body, headers={"Origin": LOCALHOST_3000})
    assert preflight.status_code in (200, 204)
    assert preflight.headers["access-control-allow-origin"] in (LOCALHOST_3000, "*")
    allowed = preflight.headers["access-control-allow-headers"].lower()
    assert allowed == "*" or all(header in allowed for header in wanted)
    assert actual.status_code == 200
    assert actual.headers["access-control-allow-origin"] in (LOCALHOST_3000, "*")
