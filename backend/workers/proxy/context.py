"""What a front door's handlers share: the door, the upstream session, the router."""

from __future__ import annotations

import aiohttp
import msgspec
from aiohttp import web

from backend.protocol.proxy import Door
from backend.workers.proxy.doors.key_use import KeyUseLog
from backend.workers.proxy.doors.wire import Dialect
from backend.workers.proxy.relay.serving import RelayBoard
from backend.workers.proxy.routing.dispatch import Router


class DoorContext(msgspec.Struct, frozen=True):
    """One door's view of the process-wide routing state."""

    door: Door
    router: Router
    board: RelayBoard
    key_use: KeyUseLog = msgspec.field(default_factory=KeyUseLog)  # shared by every door

    @property
    def session(self) -> aiohttp.ClientSession:
        """The pooled upstream session shared by every door."""
        return self.router.session

    @property
    def dialect(self) -> Dialect:
        """The error shape clients of this door's own API expect."""
        return "ollama" if self.door == "ollama" else "openai"


CONTEXT_KEY = web.AppKey("door_context", DoorContext)
