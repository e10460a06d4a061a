"""The event loop a hot worker runs on: uvloop where it is installed, asyncio's own otherwise.

The proxy worker relays every request and every streamed chunk; on asyncio's loop a good part
of its work is the loop's own Python (handles, ready queue, selector). uvloop does that in C:
counted by callgrind (``bench/instructions.py``), the worker retires 10-17 % fewer instructions
per request with it. It is a dependency where it exists (not on Windows); ``PAIR_EVENT_LOOP=
asyncio`` runs the worker on asyncio's loop instead (to compare, or to rule the loop out).
Either way the loop's out-of-descriptor errors are logged as one line per interval
(``backend/core/loop_errors.py``), never a traceback each.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any

from backend.core.loop_errors import install_accept_error_log

LOOP_ENV = "PAIR_EVENT_LOOP"


def loop_name() -> str:
    """``uvloop`` or ``asyncio``: what ``run`` will run on here."""
    if os.environ.get(LOOP_ENV, "").strip().lower() == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401 - only whether it imports
    except ImportError:
        return "asyncio"
    return "uvloop"


def run(main: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run(main)``, on uvloop when ``loop_name()`` says so, with the loop's resource
    errors rate-limited."""
    if loop_name() == "uvloop":
        import uvloop

        uvloop.run(_with_accept_error_log(main))
    else:
        asyncio.run(_with_accept_error_log(main))


async def _with_accept_error_log(main: Coroutine[Any, Any, None]) -> None:
    install_accept_error_log()
    await main
