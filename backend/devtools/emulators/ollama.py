"""An Ollama emulator standing in for the real engine (routes of Ollama's ``GenerateRoutes``).

Serves ``/``, ``/api/*`` (NDJSON streaming, Ollama's error bodies and statuses, keep_alive
load/unload, ``/api/pull`` progress) and the ``/v1`` OpenAI layer, on an aiohttp app with a
timing model, per-model parallel slots with FIFO queueing and cancellation on disconnect.
``GET /_emulator/state`` is fake-only introspection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from backend.common.tasks import TaskSet
from backend.core.clock import Clock, SystemClock
from backend.devtools.emulators import ollama_inference as inference
from backend.devtools.emulators import ollama_models as models
from backend.devtools.emulators import ollama_openai as openai_layer
from backend.devtools.emulators.ollama_http import ENGINE, cors, engine_of, gin_errors, host_check
from backend.devtools.emulators.ollama_state import OllamaConfig, OllamaEngine
from backend.devtools.emulators.wire import js_json, json_response


def build_ollama_app(
    config: OllamaConfig, *, clock: Clock | None = None, loopback: bool = True
) -> web.Application:
    """The Ollama emulator as an aiohttp app (run it with ``EmulatorServer``)."""
    middlewares = [gin_errors, cors]
    if config.host_check:
        middlewares.append(host_check(loopback))
    app = web.Application(middlewares=middlewares)
    app[ENGINE] = OllamaEngine(config, clock or SystemClock())
    app.cleanup_ctx.append(_background)
    _add_routes(app)
    return app


def _add_routes(app: web.Application) -> None:
    router = app.router
    router.add_get("/", models.root)
    router.add_get("/api/version", models.version)
    router.add_get("/api/tags", models.tags)
    router.add_get("/api/ps", models.ps, allow_head=False)
    router.add_post("/api/show", models.show)
    router.add_post("/api/pull", models.pull)
    router.add_delete("/api/delete", models.delete)
    router.add_post("/api/copy", models.copy)
    router.add_post("/api/generate", inference.generate)
    router.add_post("/api/chat", inference.chat)
    router.add_post("/api/embed", inference.embed)
    router.add_post("/api/embeddings", inference.embeddings)
    router.add_post("/v1/chat/completions", openai_layer.chat_completions)
    router.add_post("/v1/completions", openai_layer.completions)
    router.add_post("/v1/embeddings", openai_layer.embeddings)
    router.add_get("/v1/models", openai_layer.list_models, allow_head=False)
    router.add_get("/v1/models/{model:.+}", openai_layer.retrieve_model, allow_head=False)
    router.add_get("/_emulator/state", state, allow_head=False)


async def state(request: web.Request) -> web.Response:
    """``GET /_emulator/state`` (emulator only): loaded runners, requests, counters."""
    return json_response(js_json(engine_of(request).state()))


async def _background(app: web.Application) -> AsyncIterator[None]:
    """Run the keep_alive reaper while the app serves; stop loads and pulls at shutdown."""
    engine = app[ENGINE]
    tasks = TaskSet("ollama-emulator")
    tasks.spawn(engine.scheduler.run(), name="keep-alive reaper")
    try:
        yield
    finally:
        await tasks.close()
        await engine.scheduler.stop()
        await engine.pulls.stop()
