"""The soak's traffic: mixed requests through the nodes' front doors, each judged by its outcome.

Not a benchmark itself; ``bench/soak.py`` drives it. A request is an API (Ollama ``/api/chat``,
``/api/generate``, OpenAI ``/v1/chat/completions``), streamed or not, sent by the official
``ollama`` or ``openai`` client or by raw aiohttp, to one node's Ollama door (which speaks both
APIs) for a model that node, another node or all of them have. Every outcome is one of:

- ``ok``: a complete answer (content, and the final ``done`` / ``finish_reason`` / ``[DONE]``);
- ``clear``: a failure the client can tell apart: an HTTP error whose body names the error in
  the API's shape, an error chunk in a stream, or a transport failure (refused, reset, a stream
  cut before its end) that the client library raises as such;
- ``unclear``: anything else a client cannot act on: a bare 500, an empty or non-JSON error
  body, a 200 that ends cleanly without its final marker, an unparseable answer;
- ``hung``: no outcome within the hang deadline.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Final, Literal

import aiohttp
import httpx
import ollama
import openai

Verdict = Literal["ok", "clear", "unclear", "hung"]
Api = Literal["chat", "generate", "openai"]
Sender = Literal["ollama", "openai", "aiohttp"]

PROMPT: Final = "Tell me about the soak test."
REASON_PHRASES: Final = frozenset(status.phrase.lower() for status in HTTPStatus)
# (sender, api) pairs and their weights: about half through the official clients.
KINDS: Final[tuple[tuple[Sender, Api, int], ...]] = (
    ("ollama", "chat", 3),
    ("ollama", "generate", 2),
    ("openai", "openai", 3),
    ("aiohttp", "chat", 2),
    ("aiohttp", "generate", 2),
    ("aiohttp", "openai", 2),
)


class Unclear(Exception):
    """An answer no client could act on; the message says what it was."""


class ClearError(Exception):
    """An error answer that names the error in the API's shape; the message is the reason."""


@dataclass(frozen=True)
class Spec:
    """One request: who sends what to which door, for which model, streamed or not."""

    sender: Sender
    api: Api
    stream: bool
    node: str
    door: str
    model: str
    tokens: int

    @property
    def label(self) -> str:
        """``sender api stream|whole``, for the report."""
        return f"{self.sender} {self.api} {'stream' if self.stream else 'whole'}"


@dataclass(frozen=True)
class Outcome:
    """What one request came to: its verdict, a short reason and how long it took."""

    spec: Spec
    verdict: Verdict
    reason: str
    started: float
    seconds: float


@dataclass
class Ledger:
    """Every outcome so far, and the requests still in flight (monotonic start times)."""

    outcomes: list[Outcome] = field(default_factory=list)
    in_flight: dict[int, tuple[Spec, float]] = field(default_factory=dict)

    def sent(self) -> int:
        """Requests sent: finished plus in flight."""
        return len(self.outcomes) + len(self.in_flight)

    def count(self, verdict: Verdict) -> int:
        """Outcomes with ``verdict``."""
        return sum(outcome.verdict == verdict for outcome in self.outcomes)

    def reasons(self, verdict: Verdict) -> Counter[str]:
        """How often each reason came with ``verdict``."""
        return Counter(outcome.reason for outcome in self.outcomes if outcome.verdict == verdict)


def pick(rng: random.Random, doors: dict[str, str], models: list[str]) -> Spec:
    """A random request to one of ``doors`` (node name to its Ollama door URL)."""
    sender, api, _ = rng.choices(KINDS, weights=[weight for *_, weight in KINDS])[0]
    node = rng.choice(sorted(doors))
    # Now and then a long one, so that chaos lands in the middle of a stream.
    tokens = rng.choice((4, 8, 16, 32)) if rng.random() > 0.15 else 300
    return Spec(sender, api, rng.random() < 0.6, node, doors[node], rng.choice(models), tokens)


async def send(spec: Spec, session: aiohttp.ClientSession, hang_after: float) -> Outcome:
    """Send ``spec`` and judge what came back."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(hang_after):
            if spec.sender == "ollama":
                await _ollama(spec, hang_after)
            elif spec.sender == "openai":
                await _openai(spec, hang_after)
            else:
                await _aiohttp(spec, session)
        verdict: Verdict = "ok"
        reason = "ok"
    except TimeoutError:
        verdict, reason = "hung", f"no outcome within {hang_after:.0f} s"
    except Unclear as exc:
        verdict, reason = "unclear", str(exc)
    except Exception as exc:
        verdict, reason = _judge(exc)
    return Outcome(spec, verdict, reason, started, time.monotonic() - started)


# --- the official clients -------------------------------------------------------------------


async def _ollama(spec: Spec, hang_after: float) -> None:
    client = ollama.AsyncClient(host=spec.door, timeout=hang_after + 30)
    try:
        if spec.api == "chat":
            await _ollama_chat(client, spec)
        else:
            await _ollama_generate(client, spec)
    finally:
        await client.close()  # type: ignore[no-untyped-call]


async def _ollama_chat(client: ollama.AsyncClient, spec: Spec) -> None:
    messages = [{"role": "user", "content": PROMPT}]
    options = {"num_predict": spec.tokens}
    if spec.stream:
        stream = await client.chat(spec.model, messages, stream=True, options=options)
        parts = [part async for part in stream]
        _ollama_ended(bool(parts) and bool(parts[-1].done), "chat")
    else:
        whole = await client.chat(spec.model, messages, options=options)
        _ollama_ended(bool(whole.done and whole.message.content), "chat")


async def _ollama_generate(client: ollama.AsyncClient, spec: Spec) -> None:
    options = {"num_predict": spec.tokens}
    if spec.stream:
        stream = await client.generate(spec.model, PROMPT, stream=True, options=options)
        parts = [part async for part in stream]
        _ollama_ended(bool(parts) and bool(parts[-1].done), "generate")
    else:
        whole = await client.generate(spec.model, PROMPT, options=options)
        _ollama_ended(bool(whole.done and whole.response), "generate")


def _ollama_ended(complete: bool, api: str) -> None:
    if not complete:
        raise Unclear(f"ollama client: a 200 {api} answer without done or content")


async def _openai(spec: Spec, hang_after: float) -> None:
    client = openai.AsyncOpenAI(
        base_url=f"{spec.door}/v1", api_key="soak", max_retries=0, timeout=hang_after + 30
    )
    messages: Any = [{"role": "user", "content": PROMPT}]
    try:
        if spec.stream:
            stream = await client.chat.completions.create(
                model=spec.model, messages=messages, max_tokens=spec.tokens, stream=True
            )
            finishes = [c.choices[0].finish_reason async for c in stream if c.choices]
            if not any(finishes):
                raise Unclear("openai client: a stream that ended without a finish_reason")
        else:
            whole = await client.chat.completions.create(
                model=spec.model, messages=messages, max_tokens=spec.tokens
            )
            if not whole.choices or not whole.choices[0].message.content:
                raise Unclear("openai client: a 200 answer without content")
    finally:
        await client.close()


def _judge(exc: Exception) -> tuple[Verdict, str]:
    """The verdict on an exception a client raised (other than a timeout or ``Unclear``)."""
    if isinstance(exc, ClearError):
        return "clear", str(exc)
    if isinstance(exc, ollama.ResponseError):
        text = str(exc.error).strip()
        if not text or text.lower() in REASON_PHRASES or text.startswith("<"):
            return "unclear", f"HTTP {exc.status_code} with no error message: {text[:60]!r}"
        return "clear", f"HTTP {exc.status_code}: {_short(text)}"
    if isinstance(exc, openai.APIStatusError):
        message = _openai_message(exc.body)
        if message is None:
            return "unclear", f"HTTP {exc.status_code} without an error object: {exc.body!r:.60}"
        return "clear", f"HTTP {exc.status_code}: {_short(message)}"
    if isinstance(exc, openai.APITimeoutError):
        return "hung", "the openai client timed out"
    if isinstance(exc, openai.APIError) and _openai_message(exc.body) is not None:
        return "clear", f"error in the stream: {_short(str(_openai_message(exc.body)))}"
    if isinstance(exc, openai.APIConnectionError | ConnectionError | aiohttp.ClientError):
        return "clear", f"transport: {type(exc).__name__}"
    if isinstance(exc, httpx.TimeoutException):
        return "hung", f"the client timed out ({type(exc).__name__})"
    if type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore"):
        return "clear", f"transport: {type(exc).__name__}"
    return "unclear", f"{type(exc).__name__}: {str(exc)[:80]}"


def _openai_message(body: object) -> str | None:
    """The message of an OpenAI error body (the object itself or ``{"error": {...}}``)."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"] or None
    return None


def _short(text: str) -> str:
    """An error message without the parts that differ per request (quoted names, numbers)."""
    return " ".join(text.split())[:90]


# --- raw aiohttp ----------------------------------------------------------------------------

PATHS: Final[dict[Api, str]] = {
    "chat": "/api/chat",
    "generate": "/api/generate",
    "openai": "/v1/chat/completions",
}


def _body(spec: Spec) -> dict[str, Any]:
    if spec.api == "openai":
        messages = [{"role": "user", "content": PROMPT}]
        return {"model": spec.model, "messages": messages, "stream": spec.stream,
                "max_tokens": spec.tokens}  # fmt: skip
    body: dict[str, Any] = {"model": spec.model, "stream": spec.stream}
    body["options"] = {"num_predict": spec.tokens}
    if spec.api == "chat":
        body["messages"] = [{"role": "user", "content": PROMPT}]
    else:
        body["prompt"] = PROMPT
    return body


async def _aiohttp(spec: Spec, session: aiohttp.ClientSession) -> None:
    async with session.post(spec.door + PATHS[spec.api], json=_body(spec)) as response:
        if response.status >= 400:
            _http_error(response.status, await response.read())
        if response.status != 200:
            raise Unclear(f"HTTP {response.status} from an inference route")
        if not spec.stream:
            _whole(spec.api, await response.read())
        elif spec.api == "openai":
            _server_sent_events(await _lines(response))
        else:
            _ndjson(spec.api, await _lines(response))


async def _lines(response: aiohttp.ClientResponse) -> list[bytes]:
    return [line.strip() async for line in response.content if line.strip()]


def _http_error(status: int, body: bytes) -> None:
    """Raise what an error answer amounts to: clear if it names the error in an API's shape."""
    try:
        decoded = json.loads(body)
    except ValueError:
        raise Unclear(f"HTTP {status} with a body that is not JSON: {body[:60]!r}") from None
    error = decoded.get("error") if isinstance(decoded, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    if not isinstance(message, str) or not message.strip():
        raise Unclear(f"HTTP {status} without an error message: {body[:60]!r}")
    raise ClearError(f"HTTP {status}: {_short(message)}")


def _whole(api: Api, body: bytes) -> None:
    try:
        answer = json.loads(body)
    except ValueError:
        raise Unclear(f"a 200 {api} answer that is not JSON: {body[:60]!r}") from None
    if api == "openai":
        choices = answer.get("choices") or [{}]
        complete = bool(choices[0].get("message", {}).get("content"))
    else:
        text = answer.get("message", {}).get("content") if api == "chat" else answer.get("response")
        complete = bool(answer.get("done")) and bool(text)
    if not complete:
        raise Unclear(f"a 200 {api} answer without done or content: {body[:60]!r}")


def _ndjson(api: Api, lines: list[bytes]) -> None:
    parts = []
    for line in lines:
        try:
            parts.append(json.loads(line))
        except ValueError:
            raise Unclear(f"a {api} stream line that is not JSON: {line[:60]!r}") from None
    for part in parts:
        if isinstance(part.get("error"), str) and part["error"]:
            raise ClearError(f"error in the stream: {_short(part['error'])}")
    if not parts or not parts[-1].get("done"):
        raise Unclear(f"a 200 {api} stream that ended cleanly without done")


def _server_sent_events(lines: list[bytes]) -> None:
    events = [line.removeprefix(b"data:").strip() for line in lines if line.startswith(b"data:")]
    finished = False
    for event in events:
        if event == b"[DONE]":
            continue
        try:
            chunk = json.loads(event)
        except ValueError:
            raise Unclear(f"an SSE event that is not JSON: {event[:60]!r}") from None
        if chunk.get("error"):
            raise ClearError(f"error in the stream: {_short(str(chunk['error']))}")
        finished = finished or any(c.get("finish_reason") for c in chunk.get("choices") or [])
    if not events or events[-1] != b"[DONE]" or not finished:
        raise Unclear("a 200 OpenAI stream that ended cleanly without finish_reason and [DONE]")


# --- the load -------------------------------------------------------------------------------


class Traffic:
    """``concurrency`` closed loops sending random requests to the doors ``doors()`` names,
    each outcome recorded in ``ledger``, until ``stop()``; ``run`` returns once every request
    it sent has an outcome (each has the hang deadline)."""

    def __init__(
        self,
        doors: Callable[[], dict[str, str]],
        models: list[str],
        *,
        concurrency: int,
        hang_after: float,
        seed: int,
    ) -> None:
        self.ledger = Ledger()
        self._doors = doors
        self._models = models
        self._concurrency = concurrency
        self._hang_after = hang_after
        self._rng = random.Random(seed)
        self._stopping = asyncio.Event()
        self._numbers = iter(range(1 << 62))

    def stop(self) -> None:
        """Send no more requests."""
        self._stopping.set()

    async def run(self) -> None:
        """The loops, until ``stop()`` and the last outcome."""
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=self._hang_after + 30)
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
            asyncio.TaskGroup() as group,
        ):
            for index in range(self._concurrency):
                group.create_task(self._loop(session), name=f"soak:traffic:{index}")

    async def _loop(self, session: aiohttp.ClientSession) -> None:
        while not self._stopping.is_set():
            doors = self._doors()
            if not doors:
                await asyncio.sleep(0.2)
                continue
            spec = pick(self._rng, doors, self._models)
            number = next(self._numbers)
            self.ledger.in_flight[number] = (spec, time.monotonic())
            try:
                outcome = await send(spec, session, self._hang_after)
            except asyncio.CancelledError:
                since = self.ledger.in_flight[number][1]
                reason = "still unanswered when the soak ended"
                hung = Outcome(spec, "hung", reason, since, time.monotonic() - since)
                self.ledger.outcomes.append(hung)
                raise
            finally:
                del self.ledger.in_flight[number]
            self.ledger.outcomes.append(outcome)
            await asyncio.sleep(self._rng.uniform(0, 0.2))
