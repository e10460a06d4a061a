"""After the commit: the engine's response streams to the client chunk by chunk, never retried.

A client that leaves a chunk unread for the write deadline is cut (a half-open "zombie"); a
stream that ends without the engine's final marker reads Failed, not Completed. A complete
answer's job is ended before the byte that completes it goes to the client (the chunk with the
final marker, the last of a counted body, or the end of any other), so a client that has its
whole answer never finds a job that failed because this process died just after, nor (its
end being in the journal by then: ``channels/journal.py``) one that a killed broker lost. An
engine that goes silent for the idle bound, whose connection breaks, or whose member leaves the
routing table (the router cuts the relay's wait: ``routing/liveness.py``) ends the stream: a
streaming client gets a last record saying why, in its API's error shape (Ollama's
``{"error": ...}`` line, an SSE error event), then its connection is closed before the
response's end, so a client that reads no records still sees an incomplete response.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TypeVar

import aiohttp
import msgspec
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from backend.workers.proxy.channels.jobs import Job
from backend.workers.proxy.doors.wire import dialect_for, error_body
from backend.workers.proxy.translate.base import ReplyTranslator, Translation
from backend.workers.proxy.upstream.answer import Upstream
from backend.workers.proxy.upstream.attempt import Commit
from backend.workers.proxy.upstream.engine_client import EngineResponse
from backend.workers.proxy.upstream.forward import (
    JOB_KEY_HEADER,
    PROXY_MS_HEADER,
    SERVED_BY_HEADER,
    STARTED_KEY,
    cors_headers,
    elapsed_ms,
    format_ms,
    response_headers,
)
from backend.workers.proxy.upstream.markers import EndMarker
from backend.workers.proxy.upstream.message_start import with_message_start
from backend.workers.proxy.upstream.openai_errors import openai_error
from backend.workers.proxy.upstream.openai_errors import (  # its callers import it from here
    openai_error_body as openai_error_body,
)
from backend.workers.proxy.upstream.translated import is_stream, stream_headers, translated_whole
from backend.workers.proxy.upstream.watchdog import Watchdog

_Answer = TypeVar("_Answer", bound=web.StreamResponse)


async def stream_commit(
    request: web.Request,
    commit: Commit,
    job: Job,
    *,
    write_deadline_s: float,
    idle_s: float,
    on_output: Callable[[], None],
    on_chunk: Callable[[bytes], None] | None = None,
    served_by: str,
    translation: Translation | None = None,
) -> web.StreamResponse:
    """Answer the client with the committed response; ``on_output`` once a 2xx one starts,
    ``on_chunk`` with each chunk of its body (the engine's, before any translation).
    ``served_by`` (the node whose engine answered) and the job's key go out in headers.

    ``idle_s`` bounds the wait for each next chunk of the engine's (0: no bound). With a
    ``translation`` the client gets the answer in its own API: a whole one translated at once,
    a stream record by record as it comes.
    """
    upstream = commit.upstream
    try:
        success = 200 <= upstream.status < 300
        if translation is not None and not is_stream(upstream, success):
            whole = await translated_whole(upstream, commit.first, translation, job, on_output)
            return _name_server(whole, served_by, job)
        if not success and dialect_for(job.path) == "openai":
            reshaped = await openai_error(upstream, commit.first)
            if reshaped is not None:
                job.failed(f"the engine answered {upstream.status}")
                return _name_server(reshaped, served_by, job)
        if success:
            on_output()
            if translation is None and upstream.content_length is None:
                content_type = upstream.headers.get("Content-Type", "")
                commit.first = with_message_start(commit.first, job.path, content_type, job.model)
        response = _name_server(_prepared_headers(request, upstream), served_by, job)
        translator = None
        if translation is not None:
            translator = translation.reply
            stream_headers(response, translation)
        writer = await response.prepare(request)
        marker = EndMarker(upstream.headers.get("Content-Type", ""))
        job.streamed = marker.streaming
        # A success is ended early by the relay (see the module): a whole body by its length
        # (-1: nothing to count), a stream only by its final marker, counted or not.
        counted = success and not marker.streaming and upstream.content_length
        left = upstream.content_length if counted and upstream.content_length else -1
        relay = _Relay(
            request,
            response,
            job,
            marker,
            write_deadline_s,
            idle_s,
            on_chunk,
            success,
            left,
            writer,
            translator,
        )
        if not await relay.body(commit):
            return response
        if not success:
            job.failed(f"the engine answered {upstream.status} {upstream.reason or ''}".strip())
        elif marker.complete():
            job.completed()  # before the body's end goes out (if the relay has not already)
        else:
            job.failed("the stream ended without the engine's final marker")
        await response.write_eof()
        return response
    finally:
        commit.discard()  # the response was read to its end, or it is cut


class _Relayed(web.StreamResponse):
    """A relayed answer: its headers go out with its first chunk (already read at the commit)
    in one write, as ``web.Response``'s do, rather than in a write of their own."""

    _send_headers_immediately = False

    def send_now(self, transport: asyncio.Transport, chunked: bool, data: bytes) -> None:
        """Write a chunk of the body from a callback (the lean client's relay), framed as
        aiohttp frames the chunks it writes itself."""
        transport.write(b"%x\r\n%b\r\n" % (len(data), data) if chunked else data)


def _prepared_headers(request: web.Request, upstream: Upstream) -> _Relayed:
    response = _Relayed(status=upstream.status, reason=upstream.reason)
    response.headers.extend(response_headers(upstream))
    response.headers.extend(cors_headers(request))
    if upstream.content_length is not None:
        response.content_length = upstream.content_length
    response.headers[PROXY_MS_HEADER] = format_ms(elapsed_ms(request[STARTED_KEY]))
    return response


def _name_server(response: _Answer, served_by: str, job: Job) -> _Answer:
    """Say which node served the answer, and its job (a relayed answer's member named these
    too: they are replaced, the node being the same)."""
    headers = response.headers
    headers[SERVED_BY_HEADER] = served_by
    headers[JOB_KEY_HEADER] = job.key
    return response


_WRITING, _READING = "writing", "reading"
# Unsent bytes on the client's connection past which the engine is not read (aiohttp's own
# writes wait for the same amount to drain).
_WRITE_HIGH = 64 * 1024


class _Relay(msgspec.Struct):
    """Copies a committed body to the client and ends it with the reason if it is cut."""

    request: web.Request
    response: _Relayed
    job: Job
    marker: EndMarker
    write_deadline_s: float
    idle_s: float
    on_chunk: Callable[[bytes], None] | None
    success: bool
    left: int  # bytes of a counted 2xx body still to come; -1 when not counted
    writer: AbstractStreamWriter | None  # the response's, once prepared
    translator: ReplyTranslator | None = None  # the engine's records into the client's API

    async def body(self, commit: Commit) -> bool:
        """Copy the body; False when it was cut (the job already says why)."""
        upstream = commit.upstream
        watchdog = commit.watchdog or Watchdog()
        try:
            if isinstance(upstream, EngineResponse) and self.writer is not None:
                await self._pump(commit.first, upstream, self.writer, watchdog)
            elif self.translator is not None:
                await self._translate(commit.first, upstream, self.translator, watchdog)
            else:
                await self._copy(commit.first, upstream, watchdog)
            watchdog.end()
        except asyncio.CancelledError:
            fired = watchdog.fired
            if fired is None or not watchdog.uncancel():
                raise
            if fired == _WRITING:
                self.job.cancelled("the client stopped reading")
                _abort(self.request)
                return False
            reason = watchdog.why or f"the engine sent nothing for {self.idle_s:g} s"
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, OSError) as exc:
            if isinstance(exc, ConnectionResetError) and _client_gone(self.request):
                raise
            reason = f"the engine's response broke off: {exc or type(exc).__name__}"
        else:
            return True
        finally:
            watchdog.close()
        self.job.failed(reason)  # nothing if its answer was already complete
        await self._end_with(reason)
        return False

    async def _copy(self, chunk: bytes, upstream: Upstream, watchdog: Watchdog) -> None:
        """Read a chunk, write it, and again (aiohttp's client: a peer's answer)."""
        while chunk:
            self._take(chunk)
            watchdog.begin(_WRITING, self.write_deadline_s)
            await self.response.write(chunk)
            watchdog.begin(_READING, self.idle_s)
            chunk = await upstream.content.readany()

    async def _translate(
        self, chunk: bytes, upstream: Upstream, translator: ReplyTranslator, watchdog: Watchdog
    ) -> None:
        """As ``_copy``, each chunk translated: only the client's whole records go out."""
        while chunk:
            self._take(chunk)
            out = translator.chunk(chunk)
            if out:
                watchdog.begin(_WRITING, self.write_deadline_s)
                await self.response.write(out)
            watchdog.begin(_READING, self.idle_s)
            chunk = await upstream.content.readany()

    async def _pump(
        self,
        first: bytes,
        upstream: EngineResponse,
        writer: AbstractStreamWriter,
        watchdog: Watchdog,
    ) -> None:
        """The lean client's answer: its first chunk goes out with the headers, through
        aiohttp; each next one is written to the client's connection from the engine
        connection's callback as it comes, with no task woken for it. The task wakes only at
        the end, at a break, or when the client's connection has more than ``_WRITE_HIGH``
        unsent: then the engine is not read until that is written (within the write deadline).
        A translated answer is translated in that same callback, its records written as they
        complete.
        """
        translator = self.translator
        out = self._out(first, translator)
        while not out:  # a translation may hold the first chunks back: the headers wait
            if not first:
                return
            watchdog.begin(_READING, self.idle_s)
            first = await upstream.content.readany()
            out = self._out(first, translator)
        watchdog.begin(_WRITING, self.write_deadline_s)
        await self.response.write(out)
        transport = self.request.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client has gone")
        chunked = self.response.headers.get("Transfer-Encoding", "").lower() == "chunked"
        take, idle_s = self._take, self.idle_s
        send_now = self.response.send_now

        def sink(chunk: bytes) -> None:
            take(chunk)
            if transport.is_closing():
                return  # the client left: its handler is being cancelled
            out = chunk if translator is None else translator.chunk(chunk)
            if out:
                send_now(transport, chunked, out)
            if upstream.paused:
                return
            if transport.get_write_buffer_size() > _WRITE_HIGH:
                upstream.pause()
            else:
                watchdog.begin(_READING, idle_s)

        rest = upstream.take_buffered()
        upstream.relay(sink)
        try:
            watchdog.begin(_READING, idle_s)
            if rest:
                sink(rest)
            while True:
                await upstream.wait()
                if upstream.done:
                    return
                if upstream.paused:
                    watchdog.begin(_WRITING, self.write_deadline_s)
                    await writer.drain()
                    watchdog.begin(_READING, idle_s)
                    upstream.resume()
        finally:
            upstream.relay(None)

    def _out(self, chunk: bytes, translator: ReplyTranslator | None) -> bytes:
        """Account for ``chunk``; what of it goes to the client (all of it, or its whole
        records translated)."""
        if not chunk:
            return chunk
        self._take(chunk)
        return chunk if translator is None else translator.chunk(chunk)

    def _take(self, chunk: bytes) -> None:
        """Account for a chunk about to go to the client (its answer's job ends first if it
        completes the answer)."""
        self.marker.feed(chunk)
        job = self.job
        if not job.chunks:
            job.first_chunk_at = time.time()
        job.chunks += 1
        if self.on_chunk is not None:
            self.on_chunk(chunk)
        if self.success and not self.job.finished and self._ends(chunk):
            self.job.completed()  # before the client can see its answer whole

    def _ends(self, chunk: bytes) -> bool:
        """Whether ``chunk`` completes the answer: the last of a counted body, or a stream's
        chunk ending in its final marker."""
        if self.left >= 0:
            self.left -= len(chunk)
            return self.left <= 0
        return self.marker.ended_by(chunk)

    async def _end_with(self, reason: str) -> None:
        """Tell a streaming client why its stream ends, then close its connection (no end)."""
        record = self._error_record(reason)
        if record is not None:
            with contextlib.suppress(TimeoutError, ConnectionResetError, aiohttp.ClientError):
                await _write(self.response, record, self.write_deadline_s)
        transport = self.request.transport
        if transport is not None:
            transport.close()  # flushes the record first

    def _error_record(self, reason: str) -> bytes | None:
        marker = self.marker
        if not marker.streaming or self.response.content_length is not None:
            return None  # a whole body or a counted one: nothing can be added
        if self.job.outcome == "completed":
            return None  # the client has its whole answer, final marker and all
        if marker.ended_in_error():
            return None  # a peer relaying its engine's break has said so already
        if self.translator is not None:
            return self.translator.error_record(reason)
        dialect = dialect_for(self.job.path)
        kind = "api_error" if dialect == "anthropic" else "server_error"
        record = msgspec.json.encode(error_body(dialect, reason, kind=kind, code=None))
        if marker.event_stream:
            event = b"event: error\n" if dialect == "anthropic" else b""
            record = event + b"data: " + record + b"\n\n"
        else:
            record += b"\n"
        # A line cut in the middle is ended first, so the record stands on a line of its own.
        return (b"\n" if marker.mid_line else b"") + record


async def _write(response: web.StreamResponse, chunk: bytes, deadline: float) -> None:
    async with asyncio.timeout(deadline):
        await response.write(chunk)


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _abort(request: web.Request) -> None:
    """Cut the client's connection so it sees an incomplete response, not a clean end."""
    transport = request.transport
    if transport is not None:
        transport.abort()
