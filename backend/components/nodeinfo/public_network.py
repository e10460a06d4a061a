"""The node API on a public network (the ``public_network`` setting): a stranger, neither a member
over its pinned TLS nor this computer, gets a refusal and nothing else. Node-info and incoming
invites are refused; only the joiner's side of an invite this computer opened still answers
(so the owner can still invite), and members keep every route."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web
from aiohttp.typedefs import Middleware

from backend.components.cluster import messages

# The joiner's messages of an invite this computer opened: they act on nothing else.
OWN_INVITE_PATHS = frozenset(
    {messages.START_PATH, messages.CONFIRM_PATH, messages.FINISH_PATH, messages.HELLO_PATH}
)
REFUSAL = (
    "this computer is on a public network (its public_network setting): it answers only the "
    "members of its cluster"
)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def strangers_refused(
    public_network: Callable[[], bool], trusted: Callable[[web.Request], bool]
) -> Middleware:
    """A middleware that answers 403 to a stranger while ``public_network()`` holds."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in OWN_INVITE_PATHS and public_network() and not trusted(request):
            return web.Response(
                status=403,
                body=msgspec.json.encode({"error": REFUSAL}),
                content_type="application/json",
                headers={"Cache-Control": "no-store"},
            )
        return await handler(request)

    return guard
