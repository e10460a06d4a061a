"""HTTP conventions of the Ollama emulator: gin's bodies for 404/405, CORS, the Host check."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web

from backend.devtools.emulators.catalog import ModelSpec
from backend.devtools.emulators.ollama_state import OllamaEngine
from backend.devtools.emulators.options import RequestError, parse_json_object
from backend.devtools.emulators.wire import JSON_UTF8, go_json, json_response, rfc3339_nano

ENGINE: Final = web.AppKey("ollama_engine", OllamaEngine)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_CORS_HEADERS: Final = (
    "Authorization,Content-Type,User-Agent,Accept,X-Requested-With,OpenAI-Beta,"
    "x-stainless-arch,x-stainless-async,x-stainless-custom-poll-interval,"
    "x-stainless-helper-method,x-stainless-lang,x-stainless-os,x-stainless-package-version,"
    "x-stainless-poll-helper,x-stainless-retry-count,x-stainless-runtime,"
    "x-stainless-runtime-version,x-stainless-timeout"
)
_CORS_METHODS: Final = "GET,POST,PUT,PATCH,DELETE,HEAD,OPTIONS"
_ORIGIN_PREFIXES: Final = (
    "http://localhost",
    "https://localhost",
    "http://127.0.0.1",
    "https://127.0.0.1",
    "http://0.0.0.0",
    "https://0.0.0.0",
    "app://",
    "file://",
    "tauri://",
    "vscode-webview://",
    "vscode-file://",
)
_LOCAL_SUFFIXES: Final = (".localhost", ".local", ".internal")


def engine_of(request: web.Request) -> OllamaEngine:
    """The emulator state behind ``request``'s app."""
    return request.app[ENGINE]


def ollama_json(value: Any, status: int = 200) -> web.Response:
    """gin's ``c.JSON``: compact, HTML-escaped, ``application/json; charset=utf-8``."""
    return json_response(go_json(value), status=status, content_type=JSON_UTF8)


def ollama_error(message: str, status: int) -> web.Response:
    """Ollama's flat error body ``{"error": "<message>"}``."""
    return ollama_json({"error": message}, status)


async def read_body(request: web.Request) -> dict[str, Any]:
    """The JSON object body; raises ``RequestError`` with Ollama's message."""
    return parse_json_object(await request.read())


def details(spec: ModelSpec) -> dict[str, Any]:
    """Ollama's ``ModelDetails``."""
    return {
        "parent_model": "",
        "format": "gguf",
        "family": spec.family,
        "families": [spec.family],
        "parameter_size": spec.parameter_size,
        "quantization_level": spec.quantization,
    }


def local_time(unix_ns: int) -> str:
    """``modified_at`` / ``expires_at`` style: RFC3339 with ns and the local offset."""
    return rfc3339_nano(unix_ns, utc=False)


def utc_time(unix_ns: int) -> str:
    """``created_at`` style: RFC3339 with ns in UTC."""
    return rfc3339_nano(unix_ns, utc=True)


@web.middleware
async def gin_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """gin's plain-text ``404 page not found`` and ``405 method not allowed``."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed:
        return _plain("405 method not allowed", 405)
    except web.HTTPNotFound:
        return _plain("404 page not found", 404)
    except RequestError as exc:
        return ollama_error(str(exc), 400)


def _plain(text: str, status: int) -> web.Response:
    response = web.Response(status=status, body=text.encode())
    response.headers["Content-Type"] = "text/plain"
    return response


@web.middleware
async def cors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """gin-contrib/cors with Ollama's allowed origins; preflight answers 204."""
    origin = request.headers.get("Origin")
    if origin is None:
        return await handler(request)
    if not origin.startswith(_ORIGIN_PREFIXES):
        return web.Response(status=403)
    response: web.StreamResponse
    if request.method == "OPTIONS":
        response = web.Response(status=204)
        response.headers["Access-Control-Allow-Methods"] = _CORS_METHODS
        response.headers["Access-Control-Allow-Headers"] = _CORS_HEADERS
        response.headers["Access-Control-Max-Age"] = "43200"
    else:
        response = await handler(request)
    response.headers["Access-Control-Allow-Origin"] = origin
    response.headers["Vary"] = "Origin"
    return response


def host_check(bound_to_loopback: bool) -> Callable[..., Any]:
    """Ollama's ``allowedHostsMiddleware``: on loopback, only local Host values get through."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not bound_to_loopback:
            return await handler(request)
        host = _host_without_port(request.headers.get("Host", ""))
        if _is_local_address(host):
            return await handler(request)
        if _is_local_name(host):
            if request.method == "OPTIONS":
                return web.Response(status=204)
            return await handler(request)
        return web.Response(status=403)

    return middleware


def _host_without_port(host: str) -> str:
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        return host.split(":", 1)[0]
    return host


def _is_local_address(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_unspecified


def _is_local_name(host: str) -> bool:
    host = host.lower()
    if host in ("", "localhost", socket.gethostname().lower()):
        return True
    return host.endswith(_LOCAL_SUFFIXES)
