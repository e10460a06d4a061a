"""The child side of a worker: JSON-RPC on stdio, heartbeat answers, stdin EOF means exit."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from backend import __version__
from backend.core import logs
from backend.core.stdio import open_stdio_channel
from backend.protocol import errors, methods
from backend.protocol.peer import RpcPeer
from backend.protocol.types.broker import LOG_LEVELS, LogLevel

Handler = Callable[[Any], Awaitable[Any]]
NotificationHandler = Callable[[Any], None]


async def serve_worker(
    name: str,
    handlers: dict[str, Handler],
    level: LogLevel = "info",
    notifications: Mapping[str, NotificationHandler] | None = None,
    on_peer: Callable[[RpcPeer], None] = lambda peer: None,
) -> None:
    """Serve ``handlers``, ``notifications``, ping and log:set-level until stdin closes."""
    logs.configure(f"worker-{name}", level=level, log_dir=None, json_logs=False, bare=True)
    started = time.monotonic()

    async def on_request(method: str, params: Any, _: RpcPeer) -> Any:
        if method == methods.PING.name:
            uptime_ms = int((time.monotonic() - started) * 1000)
            return {
                "pong": True,
                "version": __version__,
                "uptime_ms": uptime_ms,
                "pid": os.getpid(),
            }
        handler = handlers.get(method)
        if handler is None:
            raise errors.MethodNotFound(f"Method not found: {method}")
        return await handler(params)

    def on_notification(method: str, params: Any, _: RpcPeer) -> None:
        if method == methods.LOG_SET_LEVEL.name and isinstance(params, dict):
            level = params.get("level")
            if level in LOG_LEVELS:
                logs.set_level(level)
        elif notifications is not None and method in notifications:
            notifications[method](params)

    reader, writer = await open_stdio_channel()
    peer = RpcPeer(
        reader,
        writer,
        name=f"{name}:broker",
        on_request=on_request,
        on_notification=on_notification,
    )
    on_peer(peer)
    loop = type(asyncio.get_running_loop())
    logging.getLogger(name).info(
        "worker %s ready (pid %d, %s.%s)", name, os.getpid(), loop.__module__, loop.__name__
    )
    await peer.run()


def run_worker(name: str, handlers: dict[str, Handler]) -> int:
    """Process entry point for a worker."""
    try:
        asyncio.run(serve_worker(name, handlers, environment_level()))
    except KeyboardInterrupt:
        return 130
    return 0


def environment_level() -> LogLevel:
    """The log level the broker passed in ``PAIR_LOG_LEVEL`` (``info`` when unset or unknown)."""
    for known in LOG_LEVELS:
        if os.environ.get("PAIR_LOG_LEVEL") == known:
            return known
    return "info"
