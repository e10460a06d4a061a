"""An asyncio JSON-RPC 2.0 peer over a byte stream: calls out, serves calls in, never blocks pushes.

One ``RpcPeer`` owns one connection: a read task, a write task and one task per incoming
request (bounded by ``max_in_flight``; reading pauses while the bound is reached, so nothing
is dropped). Outgoing frames go through an outbox so a broadcast never waits on a slow
reader; a reader that falls ``outbox_limit`` frames behind is disconnected. Over a real
transport, a frame with nothing queued before it and nothing unsent in the transport goes out
at once, before ``notify`` or the call's send returns (one write, no wake of the write task;
a proxy worker's job end reaches the broker's pipe before its client's last byte).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from backend.protocol import errors, jsonrpc
from backend.protocol.contract import Method, Push
from backend.protocol.framing import MAX_FRAME_BYTES, FrameSplitter, OversizedFrame

log = logging.getLogger(__name__)

RequestHandler = Callable[[str, Any, "RpcPeer"], Awaitable[Any]]
NotificationHandler = Callable[[str, Any, "RpcPeer"], None]

_READ_CHUNK = 256 * 1024


class Abortable(Protocol):
    """A transport that can be dropped at once."""

    def abort(self) -> None:
        """Close now, discarding what is unsent."""


class ByteWriter(Protocol):
    """The write side an ``RpcPeer`` needs: an ``asyncio.StreamWriter``, or an adapter."""

    @property
    def transport(self) -> Abortable:
        """What ``abort()`` drops (with ``get_write_buffer_size``, a real transport: frames
        may be written to it at once)."""

    def write(self, data: bytes) -> None:
        """Queue ``data``."""

    async def drain(self) -> None:
        """Wait until the queued data may be sent on."""

    def close(self) -> None:
        """Close once the queued data is sent."""


class RpcPeer:
    """One JSON-RPC connection. Owns its read, write and request-handler tasks."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: ByteWriter,
        *,
        name: str,
        on_request: RequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
        max_frame: int = MAX_FRAME_BYTES,
        max_in_flight: int = 64,
        outbox_limit: int = 10_000,
    ) -> None:
        self.name = name
        self._reader = reader
        self._writer = writer
        self._on_request = on_request
        self._on_notification = on_notification
        self._splitter = FrameSplitter(max_frame)
        self._slots = asyncio.Semaphore(max_in_flight)
        self._max_batch = max_in_flight
        self._outbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._outbox_limit = outbox_limit
        # How much a real transport still holds unsent; None: an adapter, which sends what
        # was written only when drained (every frame goes through the write task).
        self._unsent: Callable[[], int] | None = getattr(
            writer.transport, "get_write_buffer_size", None
        )
        self._writing = False  # the write task holds frames it has not finished sending
        self._running = False
        self._pending: dict[jsonrpc.RequestId, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._handlers: set[asyncio.Task[None]] = set()
        self._read_task: asyncio.Task[None] | None = None
        self._task_group: asyncio.TaskGroup | None = None
        self._closed = asyncio.Event()
        self._aborted = False
        self.context: dict[str, Any] = {}

    @property
    def closed(self) -> bool:
        """True once the connection has ended."""
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        """Return when the connection has ended."""
        await self._closed.wait()

    async def run(self) -> None:
        """Serve until EOF or ``close()``; then answer what is in flight and flush."""
        self._running = True
        try:
            async with asyncio.TaskGroup() as group:
                self._task_group = group
                writer = group.create_task(self._write_loop(), name=f"{self.name}:write")
                self._read_task = group.create_task(self._read_loop(), name=f"{self.name}:read")
                await asyncio.wait([self._read_task])
                if self._handlers:
                    await asyncio.wait(list(self._handlers))
                if not self._aborted:
                    self._outbox.put_nowait(None)
                await writer
        finally:
            self._closed.set()
            self._fail_pending()
            self._writer.close()

    def close(self) -> None:
        """Stop reading; requests already read are still answered before the connection ends."""
        if self._read_task is not None:
            self._read_task.cancel()
        else:
            self._closed.set()

    def abort(self) -> None:
        """Drop the connection now without answering anything further."""
        self._aborted = True
        while not self._outbox.empty():
            self._outbox.get_nowait()
        self._outbox.put_nowait(None)
        self._writer.transport.abort()
        self.close()

    async def call(
        self, method: str | Method[Any, Any], params: Any = None, *, timeout: float | None = 10.0
    ) -> Any:
        """Send a request and return its raw result; raises the ``RpcError`` subclass for its
        code. ``contract.call`` is the typed form."""
        if isinstance(method, Method):
            method = method.name
        if self.closed:
            raise errors.ConnectionLost(f"{self.name}: connection closed")
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            self._send(jsonrpc.request(request_id, method, params))
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            raise errors.CallTimeout(f"{method}: no answer within {timeout} s") from None
        finally:
            self._pending.pop(request_id, None)

    def notify(self, method: str | Push[Any], params: Any = None) -> None:
        """Queue a notification; never waits."""
        if isinstance(method, Push):
            method = method.name
        if not self.closed:
            self._send(jsonrpc.notification(method, params))

    def _send(self, frame: Any) -> None:
        if self._aborted:
            return
        if self._outbox.qsize() >= self._outbox_limit:
            log.warning(
                "%s: peer is not reading (%d frames queued); disconnecting",
                self.name,
                self._outbox.qsize(),
            )
            self.abort()
            return
        data = jsonrpc.encode(frame)
        unsent = self._unsent
        if (
            unsent is not None
            and self._running
            and not self._writing
            and self._outbox.empty()
            and unsent() == 0
        ):
            # Nothing is before it and the transport is keeping up: out now, in order.
            try:
                self._writer.write(data)
            except (ConnectionError, RuntimeError) as exc:
                log.debug("%s: write failed: %s", self.name, exc)
                self.close()
            return
        self._outbox.put_nowait(data)

    async def _write_loop(self) -> None:
        while True:
            self._writing = False
            data = await self._outbox.get()
            self._writing = True
            if data is None:
                return
            chunks = [data]
            while not self._outbox.empty() and len(chunks) < 256:
                more = self._outbox.get_nowait()
                if more is None:
                    self._outbox.put_nowait(None)
                    break
                chunks.append(more)
            try:
                self._writer.write(b"".join(chunks))
                await self._writer.drain()
            except (ConnectionError, RuntimeError) as exc:
                log.debug("%s: write failed: %s", self.name, exc)
                self.close()
                return

    async def _read_loop(self) -> None:
        while True:
            try:
                data = await self._reader.read(_READ_CHUNK)
            except ConnectionError as exc:
                log.debug("%s: read failed: %s", self.name, exc)
                return
            frames = self._splitter.feed(data) if data else self._splitter.finish()
            for frame in frames:
                await self._accept_frame(frame)
            if not data:
                return

    async def _accept_frame(self, frame: bytes | OversizedFrame) -> None:
        if isinstance(frame, OversizedFrame):
            log.warning("%s: discarded a %d-byte frame", self.name, frame.size)
            self._send_error(
                None,
                errors.InvalidRequest(
                    f"Invalid Request: frame of {frame.size} bytes exceeds the limit",
                    {"reason": "frame-too-large", "size": frame.size},
                ),
            )
            return
        if not frame.strip():
            return
        try:
            decoded = jsonrpc.decode_frame(frame)
        except ValueError as exc:
            self._send_error(None, errors.ParseError(f"Parse error: {exc}"))
            return
        if isinstance(decoded, list):
            await self._accept_batch(decoded)
            return
        message = jsonrpc.classify(decoded)
        if isinstance(message, jsonrpc.Request):
            await self._slots.acquire()
            self._spawn_handler(message, None)
        else:
            self._accept_message(message)

    async def _accept_batch(self, items: list[Any]) -> None:
        if not items:
            self._send_error(None, errors.InvalidRequest("Invalid Request: empty batch"))
            return
        if len(items) > self._max_batch:
            # A batch runs its calls at once: its size is bounded like the calls in flight.
            self._send_error(
                None,
                errors.InvalidRequest(
                    f"Invalid Request: a batch of {len(items)} exceeds the limit of "
                    f"{self._max_batch}",
                    {"reason": "batch-too-large", "size": len(items)},
                ),
            )
            return
        await self._slots.acquire()
        batch = _Batch()
        for item in items:
            message = jsonrpc.classify(item)
            if isinstance(message, jsonrpc.Request):
                batch.expected += 1
                self._spawn_handler(message, batch)
            elif isinstance(message, jsonrpc.Invalid):
                batch.responses.append(jsonrpc.error_response(message.id, message.error))
            else:
                self._accept_message(message)
        self._spawn(self._finish_batch(batch), "batch")

    def _accept_message(self, message: jsonrpc.Message) -> None:
        if isinstance(message, jsonrpc.Invalid):
            self._send(jsonrpc.error_response(message.id, message.error))
        elif isinstance(message, jsonrpc.Response):
            self._resolve(message)
        elif isinstance(message, jsonrpc.Notification):
            self._dispatch_notification(message)

    def _resolve(self, response: jsonrpc.Response) -> None:
        future = self._pending.get(response.id) if response.id is not None else None
        if future is None or future.done():
            log.debug("%s: response to unknown id %r ignored", self.name, response.id)
            return
        if response.error is not None:
            future.set_exception(errors.from_error_object(response.error))
        else:
            future.set_result(response.result)

    def _dispatch_notification(self, message: jsonrpc.Notification) -> None:
        if self._on_notification is None:
            return
        try:
            self._on_notification(message.method, message.params, self)
        except Exception:
            log.exception("%s: notification %s failed", self.name, message.method)

    def _spawn_handler(self, message: jsonrpc.Request, batch: _Batch | None) -> None:
        self._spawn(self._handle(message, batch), message.method)

    def _spawn(self, coro: Awaitable[None], label: str) -> None:
        assert self._task_group is not None
        task = self._task_group.create_task(_run(coro), name=f"{self.name}:{label}")
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _handle(self, message: jsonrpc.Request, batch: _Batch | None) -> None:
        try:
            frame = await self._answer(message)
        finally:
            if batch is None:
                self._slots.release()
        if batch is None:
            self._send(frame)
        else:
            batch.responses.append(frame)
            batch.done.release()

    async def _answer(self, message: jsonrpc.Request) -> dict[str, Any]:
        if self._on_request is None:
            error: errors.RpcError = errors.MethodNotFound(f"Method not found: {message.method}")
            return jsonrpc.error_response(message.id, error.to_error_object())
        try:
            result = await self._on_request(message.method, message.params, self)
        except errors.RpcError as exc:
            return jsonrpc.error_response(message.id, exc.to_error_object())
        except asyncio.CancelledError:
            error = errors.ShuttingDown("the request was cancelled by shutdown")
            return jsonrpc.error_response(message.id, error.to_error_object())
        except Exception as exc:
            log.exception("%s: %s failed", self.name, message.method)
            error = errors.InternalError(f"Internal error: {type(exc).__name__}: {exc}")
            return jsonrpc.error_response(message.id, error.to_error_object())
        return jsonrpc.result_response(message.id, result)

    async def _finish_batch(self, batch: _Batch) -> None:
        try:
            for _ in range(batch.expected):
                await batch.done.acquire()
        finally:
            self._slots.release()
        if batch.responses:
            self._send(batch.responses)

    def _send_error(self, request_id: jsonrpc.RequestId | None, exc: errors.RpcError) -> None:
        self._send(jsonrpc.error_response(request_id, exc.to_error_object()))

    def _fail_pending(self) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(errors.ConnectionLost(f"{self.name}: connection closed"))
        self._pending.clear()


class _Batch:
    def __init__(self) -> None:
        self.expected = 0
        self.responses: list[dict[str, Any]] = []
        self.done = asyncio.Semaphore(0)


async def _run(coro: Awaitable[None]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        await coro
