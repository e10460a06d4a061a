"""The demo's trickle: chat requests through the entry node's front doors, every 1-3 s, so the
jobs, loads and queues of ``pair demo`` stay busy. Now and then it asks for a model nobody has.

``Trickle.run`` owns an aiohttp session and a task group of requests in flight (at most
``MAX_IN_FLIGHT``); cancelling it ends them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from typing import Any, Final

import aiohttp
import msgspec

UNKNOWN_MODEL: Final = "mystery-model:13b"
PROMPTS: Final = (
    "Why is the sky blue?",
    "Write a haiku about routers.",
    "Explain TCP slow start to a five-year-old.",
    "Give me three names for a home lab cluster.",
)
MODEL_REFRESH_SECONDS: Final = 10.0
MAX_IN_FLIGHT: Final = 6


class TrickleRequest(msgspec.Struct, frozen=True):
    """One request the trickle sends: through which door, for which model, how long."""

    door: str
    model: str
    stream: bool
    max_tokens: int


class Trickle:
    """Sends a chat request every 1-3 s through the front doors (several may run at once)."""

    def __init__(
        self,
        doors: dict[str, str],
        *,
        report: Callable[[str], None] | None = None,
        seed: int | None = None,
    ) -> None:
        self._doors = doors
        self._report = report
        self._random = random.Random(seed)
        self._models: dict[str, list[str]] = {}
        self._refreshed = -MODEL_REFRESH_SECONDS
        self._in_flight = 0

    async def run(self) -> None:
        """Send requests until cancelled."""
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(timeout=timeout) as session, asyncio.TaskGroup() as group:
            sent = 0
            while True:
                if time.monotonic() - self._refreshed > MODEL_REFRESH_SECONDS:
                    await self._refresh_models(session)
                request = self.choose()
                if request is not None and self._in_flight < MAX_IN_FLIGHT:
                    sent += 1
                    group.create_task(self._send(session, request), name=f"demo:trickle:{sent}")
                await asyncio.sleep(self._random.uniform(1.0, 3.0))

    def choose(self) -> TrickleRequest | None:
        """The next request: a door with models, one of its models; now and then one nobody has."""
        doors = [door for door, names in self._models.items() if names]
        if "ollama" in self._doors and (not doors or self._random.random() < 0.08):
            door, model = "ollama", UNKNOWN_MODEL
        elif doors:
            door = self._random.choice(doors)
            model = self._random.choice(self._models[door])
        else:
            return None
        # llama-server with the tiny model makes thousands of tokens a second.
        longest = 800 if door == "llamacpp" else 250
        return TrickleRequest(
            door, model, self._random.random() < 0.6, self._random.randint(16, longest)
        )

    async def _refresh_models(self, session: aiohttp.ClientSession) -> None:
        self._refreshed = time.monotonic()
        paths = {"ollama": ("/api/tags", "models", "name")}
        paths |= dict.fromkeys(("openai", "llamacpp"), ("/v1/models", "data", "id"))
        for door, (path, array, key) in paths.items():
            if door not in self._doors:
                continue
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError, KeyError):
                async with session.get(self._doors[door] + path) as response:
                    listed = (await response.json())[array]
                names = [str(entry[key]) for entry in listed]
                self._models[door] = [name for name in names if "embed" not in name]

    async def _send(self, session: aiohttp.ClientSession, request: TrickleRequest) -> None:
        messages = [{"role": "user", "content": self._random.choice(PROMPTS)}]
        body: dict[str, Any] = {"model": request.model, "messages": messages}
        body["stream"] = request.stream
        if request.door == "ollama":
            path = "/api/chat"
            body["options"] = {"num_predict": request.max_tokens}
        else:
            path = "/v1/chat/completions"
            body["max_tokens"] = request.max_tokens
        started = time.monotonic()
        self._in_flight += 1
        try:
            async with session.post(self._doors[request.door] + path, json=body) as response:
                async for _ in response.content.iter_any():
                    pass
                outcome = str(response.status)
        except (aiohttp.ClientError, TimeoutError) as error:
            outcome = f"failed ({error or type(error).__name__})"
        finally:
            self._in_flight -= 1
        if self._report is not None:
            kind = "stream" if request.stream else "whole"
            seconds = time.monotonic() - started
            self._report(
                f"  {request.door:<8} {request.model:<24} {kind:<6} {outcome} in {seconds:.1f} s"
            )
