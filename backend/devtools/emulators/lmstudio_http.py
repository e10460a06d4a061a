"""HTTP conventions of the LM Studio emulator (an Express server): bodies, errors, 200-for-404."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web

from backend.devtools.emulators.catalog import ModelSpec
from backend.devtools.emulators.lmstudio_state import LmStudioEngine
from backend.devtools.emulators.options import RequestError
from backend.devtools.emulators.wire import JSON_UTF8, js_json, json_response

ENGINE: Final = web.AppKey("lmstudio_engine", LmStudioEngine)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def engine_of(request: web.Request) -> LmStudioEngine:
    """The emulator state behind ``request``'s app."""
    return request.app[ENGINE]


def express_json(value: Any, status: int = 200) -> web.Response:
    """Express's ``res.json``: compact ``JSON.stringify``, ``application/json; charset=utf-8``."""
    return json_response(js_json(value), status=status, content_type=JSON_UTF8)


def rest_error(error_type: str, message: str, status: int) -> web.Response:
    """An ``/api/v1`` error: ``{"error": {"type", "message"}}``."""
    return express_json({"error": {"type": error_type, "message": message}}, status)


def model_not_found(engine: LmStudioEngine, model: str) -> web.Response:
    """The OpenAI-style "Invalid model identifier" error (404 on current builds)."""
    keys = ", ".join(spec.name for spec in engine.catalog)
    message = (
        f'Invalid model identifier "{model}". '
        f"Please specify a valid downloaded model (e.g., {keys})."
    )
    error = {
        "message": message,
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    return express_json({"error": error}, 404)


def no_models_loaded() -> web.Response:
    """JIT off and nothing loaded."""
    error = {
        "message": "No models loaded. Please load a model in the developer page or use the "
        "'lms load' command.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    return express_json({"error": error}, 404)


async def read_body(request: web.Request) -> dict[str, Any]:
    """The JSON object body (Express's body parser: an empty body reads as ``{}``)."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise RequestError(f"Unexpected token in JSON at position {exc.pos}") from None
    if not isinstance(value, dict):
        raise RequestError("Request body must be a JSON object")
    return value


def publisher(spec: ModelSpec) -> str:
    """``publisher`` of a key (``openai/gpt-oss-20b`` -> ``openai``)."""
    return spec.name.split("/", 1)[0] if "/" in spec.name else "lmstudio-community"


def display_name(spec: ModelSpec) -> str:
    """A human name from the key (``qwen2.5-7b-instruct`` -> ``Qwen2.5 7B Instruct``)."""
    words = spec.name.rsplit("/", 1)[-1].replace("_", "-").split("-")
    return " ".join(word.upper() if word[:-1].isdigit() else word.capitalize() for word in words)


@web.middleware
async def express_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """LM Studio answers unknown routes with HTTP 200 and an error body ("Returning 200 anyway")."""
    try:
        response = await handler(request)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
        message = f"Unexpected endpoint or method. ({request.method} {request.path})"
        response = express_json({"error": message})
    except RequestError as exc:
        response = express_json({"error": str(exc)}, 400)
    if not response.prepared:
        response.headers["X-Powered-By"] = "Express"
    return response
