"""A stand-in for Hugging Face's public API, for tests and the demo.

It answers the three requests PAIR makes, in Hugging Face's shapes, from answers kept as JSON
in ``hub_data/``: ``GET /api/models?search=…`` (repositories whose id holds the words, most
downloaded first), ``GET /api/models/OWNER/NAME/tree/main`` (a repository's files) and
``GET /OWNER/NAME/resolve/main/FILE``, which redirects (302) to a CDN path as Hugging Face does;
the CDN path serves one small real GGUF model (``tiny_model``) for every ``.gguf`` file listed,
whatever size the listing says, so a pull ends with a model llama.cpp can load.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

_DATA = "hub_data"
_DEFAULT_LIMIT = 20
_NOT_FOUND = {"error": "Repository not found"}


class HubData(msgspec.Struct, frozen=True):
    """The recorded answers: search entries and each repository's file list."""

    search: list[dict[str, Any]]
    trees: dict[str, list[dict[str, Any]]]


def recorded_answers() -> HubData:
    """The answers kept in ``hub_data/`` (shapes recorded from Hugging Face's API)."""
    folder = resources.files(__package__).joinpath(_DATA)
    search = json.loads(folder.joinpath("search.json").read_text(encoding="utf-8"))
    trees = json.loads(folder.joinpath("trees.json").read_text(encoding="utf-8"))
    return HubData(search, trees)


def build_hub_app(model_file: Path, data: HubData | None = None) -> web.Application:
    """The emulator app; every listed ``.gguf`` file downloads as ``model_file``."""
    answers = data or recorded_answers()
    app = web.Application()

    async def search(request: web.Request) -> web.Response:
        return web.json_response(_search(answers, request.query.get("search", ""), request))

    async def tree(request: web.Request) -> web.Response:
        files = answers.trees.get(_repo(request))
        if files is None:
            return web.json_response(_NOT_FOUND, status=404)
        return web.json_response(files)

    async def resolve(request: web.Request) -> web.StreamResponse:
        repo, path = _repo(request), request.match_info["path"]
        if not _listed(answers, repo, path):
            return web.json_response({"error": "Entry not found"}, status=404)
        raise web.HTTPFound(f"/cdn/{repo}/{path}")

    async def cdn(request: web.Request) -> web.StreamResponse:
        if not _listed(answers, _repo(request), request.match_info["path"]):
            raise web.HTTPNotFound()
        return web.FileResponse(model_file)

    app.router.add_get("/api/models", search)
    app.router.add_get("/api/models/{owner}/{name}/tree/main", tree)
    app.router.add_get("/{owner}/{name}/resolve/main/{path:.+}", resolve)
    app.router.add_get("/cdn/{owner}/{name}/{path:.+}", cdn)
    return app


def _repo(request: web.Request) -> str:
    return f"{request.match_info['owner']}/{request.match_info['name']}"


def _listed(answers: HubData, repo: str, path: str) -> bool:
    files = answers.trees.get(repo, [])
    return path.endswith(".gguf") and any(entry.get("path") == path for entry in files)


def _search(answers: HubData, query: str, request: web.Request) -> list[dict[str, Any]]:
    words = query.lower().split()
    found = [
        entry
        for entry in answers.search
        if all(word in str(entry["id"]).lower() for word in words)
        and (request.query.get("filter") != "gguf" or "gguf" in entry.get("tags", []))
    ]
    found.sort(key=lambda entry: int(entry.get("downloads", 0)), reverse=True)
    try:
        limit = int(request.query.get("limit", _DEFAULT_LIMIT))
    except ValueError:
        raise web.HTTPBadRequest(text='{"error": "limit must be a number"}') from None
    return found[: max(limit, 0)]
