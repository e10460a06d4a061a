"""An LM Studio emulator standing in for the real engine (its HTTP server on port 1234 style).

Serves ``/lmstudio-greeting``, the OpenAI-compatible ``/v1`` endpoints (SSE with ``[DONE]``),
the REST ``/api/v0`` and ``/api/v1`` model endpoints (list with ``state`` /
``loaded_instances``, load, unload, download and its status), answers unknown routes with
HTTP 200 and ``{"error": "Unexpected endpoint or method. (...)"}`` like LM Studio's Express
server, and has JIT loading, default parallel 4 with FIFO queueing and cancellation on
disconnect. ``/_emulator/*`` routes are fake-only: introspection and what the fake ``lms``
CLI needs (LM Studio's own CLI talks over a WebSocket protocol instead).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from backend.common.tasks import TaskSet
from backend.core.clock import Clock, SystemClock
from backend.devtools.emulators import lmstudio_models as models
from backend.devtools.emulators import lmstudio_openai as openai_layer
from backend.devtools.emulators.lmstudio_http import ENGINE, engine_of, express_errors, express_json
from backend.devtools.emulators.lmstudio_state import LmStudioConfig, LmStudioEngine


def build_lmstudio_app(config: LmStudioConfig, *, clock: Clock | None = None) -> web.Application:
    """The LM Studio emulator as an aiohttp app (run it with ``EmulatorServer``)."""
    app = web.Application(middlewares=[express_errors])
    app[ENGINE] = LmStudioEngine(config, clock or SystemClock())
    app.cleanup_ctx.append(_background)
    _add_routes(app)
    return app


def _add_routes(app: web.Application) -> None:
    router = app.router
    router.add_get("/lmstudio-greeting", greeting, allow_head=False)
    router.add_get("/v1/models", v1_models, allow_head=False)
    router.add_post("/v1/chat/completions", openai_layer.chat_completions)
    router.add_post("/v1/completions", openai_layer.completions)
    router.add_post("/v1/embeddings", openai_layer.embeddings)
    router.add_get("/api/v0/models", models.v0_models, allow_head=False)
    router.add_get("/api/v0/models/{model:.+}", models.v0_model, allow_head=False)
    router.add_post("/api/v0/chat/completions", openai_layer.v0_chat_completions)
    router.add_post("/api/v0/completions", openai_layer.v0_completions)
    router.add_post("/api/v0/embeddings", openai_layer.embeddings)
    router.add_get("/api/v1/models", models.v1_models, allow_head=False)
    router.add_post("/api/v1/models/load", models.load)
    router.add_post("/api/v1/models/unload", models.unload)
    router.add_post("/api/v1/models/download", models.download)
    router.add_get("/api/v1/models/download/status", models.download_statuses, allow_head=False)
    router.add_get(
        "/api/v1/models/download/status/{job_id}", models.download_status, allow_head=False
    )
    router.add_get("/_emulator/state", state, allow_head=False)
    router.add_post("/_emulator/lms/load", models.lms_load)
    router.add_post("/_emulator/lms/unload", models.lms_unload)
    router.add_get("/_emulator/lms/ps", models.lms_ps, allow_head=False)


async def greeting(request: web.Request) -> web.Response:
    """``GET /lmstudio-greeting``: the identity probe ``lms`` and the SDK use."""
    return express_json({"lmstudio": True})


async def v1_models(request: web.Request) -> web.Response:
    """``GET /v1/models``: every downloaded model with JIT on, only loaded ones with JIT off."""
    engine = engine_of(request)
    if engine.config.jit:
        keys = [spec.name for spec in engine.catalog]
    else:
        keys = list(dict.fromkeys(i.instance_id for i in engine.scheduler.instances.values()))
    data = [{"id": key, "object": "model", "owned_by": "organization_owner"} for key in keys]
    return express_json({"data": data, "object": "list"})


async def state(request: web.Request) -> web.Response:
    """``GET /_emulator/state`` (emulator only): instances, requests, counters."""
    return express_json(engine_of(request).state())


async def _background(app: web.Application) -> AsyncIterator[None]:
    """Run the TTL reaper while the app serves; stop loads and downloads at shutdown."""
    engine = app[ENGINE]
    tasks = TaskSet("lmstudio-emulator")
    tasks.spawn(engine.scheduler.run(), name="ttl reaper")
    try:
        yield
    finally:
        await tasks.close()
        await engine.scheduler.stop()
        await engine.stop()
