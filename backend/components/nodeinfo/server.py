"""The node API listener: one TLS port on every interface for the services other computers use.

``GET /v1/node-info`` and the pairing exchange answer anyone, but node-info's figures (hardware,
load, ``pending_jobs``) and model inventories (``engines``) go only to a trusted member (by its
certificate, checked per request) and to this computer: a stranger reads only what pairing
needs; ``/v1/cluster/*`` answers only a client whose certificate matches a pin (the TLS
context comes from ``PinnedServer``, whose pins follow the membership without a restart). See
docs/CLUSTER.md.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence

import msgspec
from aiohttp import web
from aiohttp.typedefs import Middleware

from backend.common.connection_limits import ConnectionCounter, limits_for
from backend.common.fd_limit import open_file_limit
from backend.components.cluster import routes as cluster_routes
from backend.components.cluster.service import ClusterService
from backend.components.nodeinfo.payload import NodeInfoSource
from backend.components.nodeinfo.public_network import strangers_refused
from backend.core.bad_requests import BadRequestLog, is_bad_request
from backend.core.component import Component, FatalError
from backend.core.guarded_site import ConnectionGuard, GuardedSite
from backend.core.net import port_in_use
from backend.protocol.types.nodes import NodeInfo

log = logging.getLogger(__name__)

NODE_INFO_PATH = "/v1/node-info"
# Pairing messages are small, so anything larger is refused.
MAX_BODY_BYTES = 64 * 1024
SHUTDOWN_TIMEOUT_S = 2.0
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback(address: str | None) -> bool:
    """Whether ``address`` (a client's IP address) is a loopback one: this computer itself."""
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def build_app(
    source: NodeInfoSource,
    cluster: ClusterService | None = None,
    *,
    this_computer: Callable[[str | None], bool] = is_loopback,
    routes: Sequence[Callable[[web.Application], None]] = (),
    bad_requests: BadRequestLog | None = None,
    public_network: Callable[[], bool] = lambda: False,
) -> web.Application:
    """The node API's routes, with every error answered as JSON ``{"error": ...}``.

    ``this_computer`` tells from a client's address whether it runs on this computer (tests
    replace it to stand in for another computer on loopback); ``bad_requests`` logs a body that
    could not be decoded (the runner's logger, so both kinds of junk share one limit);
    ``public_network`` (the setting, read per request) refuses strangers.
    """

    def trusted(request: web.Request) -> bool:
        return this_computer(request.remote) or (
            cluster is not None and cluster_routes.member_of(cluster, request) is not None
        )

    async def node_info(request: web.Request) -> web.Response:
        return _json(200, msgspec.json.encode(source.describe(trusted=trusted(request))))

    json_errors = _json_errors(bad_requests or BadRequestLog("node API", log))
    refusal = strangers_refused(public_network, trusted)
    app = web.Application(
        client_max_size=MAX_BODY_BYTES,
        middlewares=[json_errors, refusal, cluster_routes.members_only],
    )
    app.on_response_prepare.append(_without_server_header)
    app.router.add_get(NODE_INFO_PATH, node_info)
    if cluster is not None:
        app[cluster_routes.SERVICE_KEY] = cluster
        cluster_routes.add_routes(app, cluster)
    for add_routes in routes:  # the member link (``backend/components/federation``)
        add_routes(app)
    return app


class NodeApiServer(Component):
    """Owns the node API's listening socket and the aiohttp runner that serves it."""

    ready_on_start = False

    def __init__(
        self,
        *,
        port: int,
        source: NodeInfoSource,
        ssl_context: ssl.SSLContext | None = None,
        cluster: ClusterService | None = None,
        routes: Sequence[Callable[[web.Application], None]] = (),
        host: str = "0.0.0.0",
        public_network: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__("node-api")
        self._routes = routes
        self._public_network = public_network
        self.port = port
        self._host = host
        self._source = source
        self._ssl = ssl_context
        self._cluster = cluster
        self._stopped = asyncio.Event()

    def describe(self) -> NodeInfo:
        """What the node API answers this computer, read in process."""
        return self._source.describe(trusted=True)

    async def run(self) -> None:
        """Listen until stopped; a port held by another program is fatal (nothing is killed)."""
        self._stopped.clear()
        # Reachable from the LAN: junk gets one short line, rate-limited (see bad_requests).
        bad_requests = BadRequestLog("node API", log)
        app = build_app(
            self._source,
            self._cluster,
            routes=self._routes,
            bad_requests=bad_requests,
            public_network=self._public_network,
        )
        # Slow or excess connections from the network are closed (guarded_site).
        limits = limits_for(open_file_limit(), os.environ)
        runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            logger=bad_requests,
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            keepalive_timeout=limits.keepalive_timeout_s,
        )
        await runner.setup()
        try:
            await self._listen(runner, ConnectionGuard("node API", ConnectionCounter(limits), log))
            self.announce_ready()
            log.info("node API listening on %s:%d", self._host, self.port)
            await self._stopped.wait()
        finally:
            await asyncio.shield(runner.cleanup())

    async def stop(self) -> None:
        """Stop listening; requests in progress get ``SHUTDOWN_TIMEOUT_S`` to finish."""
        self._stopped.set()

    async def _listen(self, runner: web.AppRunner, guard: ConnectionGuard) -> None:
        # With SO_REUSEADDR some platforms (BSD, macOS) let a wildcard bind share a port another
        # program holds on one address, so ask the port first; the bind still decides on Linux.
        if await port_in_use("127.0.0.1", self.port):
            raise FatalError(self._taken("another program answers on it"))
        try:
            sock = socket.create_server((self._host, self.port))
        except OSError as exc:
            raise FatalError(self._taken(exc.strerror or str(exc))) from exc
        site = GuardedSite(runner, sock, guard, ssl_context=self._ssl)  # the runner's timeout
        await site.start()

    def _taken(self, why: str) -> str:
        return (
            f"node API port {self.port} is not available ({why}); PAIR leaves that program "
            "alone: stop it or start PAIR with `pair node --node-port <port>`"
        )


async def _without_server_header(_: web.Request, response: web.StreamResponse) -> None:
    # aiohttp names itself and Python's version in ``Server``; nobody on the LAN needs that.
    response.headers.popall("Server", None)


def _json_errors(bad_requests: BadRequestLog) -> Middleware:
    @web.middleware
    async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            return _json(exc.status, _error_body(_message(request, exc)), headers)
        except Exception as exc:
            if is_bad_request(exc):
                bad_requests.bad_request(request.remote, exc)
                return _json(400, _error_body("malformed request body"))
            log.exception("node API request %s %s failed", request.method, request.path)
            return _json(500, _error_body("internal error"))

    return json_errors


def _message(request: web.Request, exc: web.HTTPException) -> str:
    if exc.status == 404:
        return f"no such path: {request.path}"
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return f"method {request.method} is not allowed on {request.path} (allowed: {allowed})"
    return exc.reason


def _error_body(message: str) -> bytes:
    return msgspec.json.encode({"error": message})


def _json(status: int, body: bytes, headers: dict[str, str] | None = None) -> web.Response:
    response = web.Response(
        status=status, body=body, content_type="application/json", headers=headers
    )
    response.headers["Cache-Control"] = "no-store"
    return response
