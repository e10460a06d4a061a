"""Who made a request a front door admitted: this computer, or another one with a LAN key.

The gate stores the key's hash on the request (``CLIENT_KEY``; ``LOOPBACK`` for this computer);
the job of an inference request names the key and the source address from it. A request that
came through no door (a member's, over the relay) has none: its own computer records it.
"""

from __future__ import annotations

from aiohttp import web

from backend.protocol.proxy import ProxyTargets
from backend.workers.proxy.doors.gate import LOOPBACK

CLIENT_KEY = web.RequestKey("pair_client", str)
LOOPBACK_CLIENT = "loopback"
UNNAMED_KEY = "(unnamed key)"


def job_client(request: web.Request, table: ProxyTargets) -> tuple[str | None, str | None]:
    """The client a job names: ``loopback`` or its key's name, and its source address; (None,
    None) for a request no door admitted."""
    key_hash = request.get(CLIENT_KEY)
    if key_hash is None:
        return None, None
    if key_hash == LOOPBACK:
        return LOOPBACK_CLIENT, request.remote
    key = table.api_keys.get(key_hash)
    return (key.name if key is not None else UNNAMED_KEY), request.remote
