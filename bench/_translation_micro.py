"""The translation functions alone, in this process, on llama-server's real answers.

Not a benchmark itself: ``bench/translation.py`` records one whole answer and one stream (as
the records the engine sent) from its llama-server, then times what the proxy worker runs per
request on them: ``translation_for`` (the request translated) and the reply translator's
``whole`` or ``chunk`` per engine record. No sockets, no event loop: the floor of what
translation can add, free of the shared machine's noise in the latency rows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from backend.workers.proxy.translate.plan import translation_for

REPEATS = 7  # timed batches; the median batch is reported


@dataclass(frozen=True)
class Recorded:
    """llama-server's whole answer, and its stream split into the records it sent."""

    whole: bytes
    records: tuple[bytes, ...]


async def record(engine_url: str, body: dict[str, object]) -> Recorded:
    """One whole answer and one stream of ``body`` from the engine."""
    url = f"{engine_url}/v1/chat/completions"
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json={**body, "stream": False}) as response:
            whole = await response.read()
        async with session.post(url, json={**body, "stream": True}) as response:
            text = await response.read()
    records = tuple(part + b"\n\n" for part in text.split(b"\n\n") if part.strip())
    return Recorded(whole, records)


def _best_us(run: Callable[[], None], loops: int) -> float:
    """Median microseconds per call of ``run`` over ``REPEATS`` batches of ``loops``."""
    batches = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        for _ in range(loops):
            run()
        batches.append((time.perf_counter() - began) * 1e6 / loops)
    return sorted(batches)[len(batches) // 2]


def translation_costs(
    recorded: Recorded, engine: str, path: str, body: dict[str, object], loops: int = 2000
) -> dict[str, float]:
    """Microseconds per request (JSON: request + whole answer; stream: request + every record)
    and per streamed record, of translating ``body`` sent to ``path`` for ``engine``."""
    plain = json.dumps({**body, "stream": False}).encode()
    streamed = json.dumps({**body, "stream": True}).encode()

    def json_request() -> None:
        translation = translation_for(engine, path, plain)
        assert translation is not None
        translation.reply.whole(recorded.whole)

    def stream_request() -> None:
        translation = translation_for(engine, path, streamed)
        assert translation is not None
        for each in recorded.records:
            translation.reply.chunk(each)

    def request_only() -> None:
        translation_for(engine, path, streamed)

    stream_us = _best_us(stream_request, loops)
    request_us = _best_us(request_only, loops)
    return {
        "json": _best_us(json_request, loops),
        "stream": stream_us,
        "per record": (stream_us - request_us) / len(recorded.records),
        "records": float(len(recorded.records)),
    }
