"""A test's HTTP server on a real loopback socket, its answers scripted by the subclass."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Self

from aiohttp import web

from backend.devtools.emulators.server import EmulatorServer


@dataclass
class ScriptedServer:
    """Serves the routes ``add_routes`` names from ``start()`` until ``stop()``."""

    server: EmulatorServer | None = field(default=None, kw_only=True)

    @property
    def url(self) -> str:
        """Where it listens (once started)."""
        assert self.server is not None
        return self.server.url

    async def start(self) -> Self:
        """Listen on a free loopback port."""
        app = web.Application()
        self.add_routes(app)
        self.server = EmulatorServer(app)
        await self.server.start()
        return self

    async def stop(self) -> None:
        """Stop listening (a no-op when it never started)."""
        if self.server is not None:
            await self.server.stop()

    def add_routes(self, app: web.Application) -> None:
        """Add the scripted routes to ``app``."""
        raise NotImplementedError
