"""A local stand-in for Ollama's GitHub releases, as far as PAIR reads them: the latest tag,
each release's files and its ``sha256sum.txt`` (``./name`` lines, as Ollama writes them).
The install tests of each platform publish their own archives in it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class GithubReleases:
    """The releases (``files`` by tag), what ``sha256sum.txt`` lists in place of a file's real
    checksum (``listed``; "" leaves the file out), and every path asked for (``requests``)."""

    url: str = ""
    latest: str = ""
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)
    listed: dict[str, str] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)

    def checksums(self, tag: str) -> str:
        """The ``sha256sum.txt`` of release ``tag``."""
        return "".join(
            f"{self.listed.get(name, hashlib.sha256(data).hexdigest())}  ./{name}\n"
            for name, data in self.files[tag].items()
            if self.listed.get(name) != ""
        )

    def add_routes(self, app: web.Application, downloads: str) -> None:
        """Serve ``/latest`` (the API's latest release) and ``<downloads>/<tag>/<name>``."""

        async def latest(request: web.Request) -> web.Response:
            self.requests.append(request.path)
            return web.json_response({"tag_name": self.latest})

        async def download(request: web.Request) -> web.Response:
            self.requests.append(request.path)
            tag, name = request.match_info["tag"], request.match_info["name"]
            if name == "sha256sum.txt" and tag in self.files:
                return web.Response(text=self.checksums(tag))
            data = self.files.get(tag, {}).get(name)
            return web.Response(body=data) if data is not None else web.Response(status=404)

        app.router.add_get("/latest", latest)
        app.router.add_get(f"{downloads}/{{tag}}/{{name}}", download)
