"""Send one chat request to a door and read its streamed answer, timing it as it comes.

The playground and the inference check share it: text goes to a callback as each record
arrives; the result names the node that served (the door's ``X-PAIR-Served-By``), the time to
the first token, the token count (the engine's where it reports one, else the records with
text) and the door's error in plain words.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp
import msgspec
from msgspec.structs import replace

from app.controllers.playground_wire import (
    JOB_HEADER,
    SERVED_BY_HEADER,
    ChatRequest,
    StreamDecoder,
    chat_body,
    chat_headers,
    chat_url,
    error_message,
)

CONNECT_TIMEOUT_S = 5.0
# An engine loading a large model may say nothing for minutes before its first token.
READ_TIMEOUT_S = 600.0
Clock = Callable[[], float]


class ChatResult(msgspec.Struct, frozen=True):
    """One answer as it went: who served it, its timing and token count, or why it failed."""

    served_by: str | None = None  # the serving node's id
    job: str | None = None
    first_token_s: float | None = None
    total_s: float | None = None
    chunks: int = 0  # records that carried text
    engine_tokens: int | None = None  # the engine's own count of the answer's tokens
    error: str | None = None
    cancelled: bool = False

    @property
    def tokens(self) -> int:
        """The answer's tokens: the engine's count, else one per record with text."""
        return self.engine_tokens if self.engine_tokens is not None else self.chunks

    @property
    def tokens_per_s(self) -> float | None:
        """Tokens per second of generation (from the first token to the end)."""
        if self.first_token_s is None or self.total_s is None or self.tokens < 2:
            return None
        generating = self.total_s - self.first_token_s
        return (self.tokens - 1) / generating if generating > 0 else None


class ChatProgress:
    """The answer so far, kept as it streams (so a stopped answer still has its figures)."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self.started = clock()
        self.result = ChatResult()

    def elapsed(self) -> float:
        """Seconds since the request went out."""
        return self._clock() - self.started

    def ended(self, *, error: str | None = None, cancelled: bool = False) -> ChatResult:
        """The final result, timed now."""
        self.result = replace(self.result, total_s=self.elapsed(), error=error, cancelled=cancelled)
        return self.result


async def stream_chat(
    session: aiohttp.ClientSession,
    request: ChatRequest,
    progress: ChatProgress,
    on_text: Callable[[str], None],
) -> ChatResult:
    """Send ``request`` and read its answer to its end; the result (errors included)."""
    timeout = aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT_S, sock_read=READ_TIMEOUT_S)
    try:
        async with session.post(
            chat_url(request),
            json=chat_body(request),
            headers=chat_headers(request),
            timeout=timeout,
        ) as response:
            progress.result = replace(
                progress.result,
                served_by=response.headers.get(SERVED_BY_HEADER),
                job=response.headers.get(JOB_HEADER),
            )
            if response.status >= 400:
                return progress.ended(error=error_message(response.status, await response.read()))
            error = await _read_answer(response, request, progress, on_text)
            return progress.ended(error=error)
    except aiohttp.ClientConnectorError:
        where = request.door_url
        return progress.ended(error=f"Cannot reach the door at {where}: is PAIR's service running?")
    except TimeoutError:
        return progress.ended(error=f"The door sent nothing for {READ_TIMEOUT_S:g} s.")
    except (aiohttp.ClientError, OSError) as exc:
        return progress.ended(error=f"The answer broke off: {exc or 'the connection closed'}.")


async def _read_answer(
    response: aiohttp.ClientResponse,
    request: ChatRequest,
    progress: ChatProgress,
    on_text: Callable[[str], None],
) -> str | None:
    """Read the records as they come; the error, if any."""
    decoder = StreamDecoder(request.api)
    async for line in response.content:
        piece = decoder.feed(line)
        if piece is None:
            continue
        if piece.error is not None:
            return piece.error
        if piece.tokens is not None:
            progress.result = replace(progress.result, engine_tokens=piece.tokens)
        if piece.text:
            _took_text(progress, piece.text, on_text)
        await asyncio.sleep(0)  # a fast stream still lets the window paint between records
    return None


def _took_text(progress: ChatProgress, text: str, on_text: Callable[[str], None]) -> None:
    first = progress.result.first_token_s
    progress.result = replace(
        progress.result,
        chunks=progress.result.chunks + 1,
        first_token_s=progress.elapsed() if first is None else first,
    )
    on_text(text)
