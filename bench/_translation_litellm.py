"""LiteLLM's SDK as a client of PAIR's Ollama door, for ``bench/translation.py``.

Not a benchmark itself. LiteLLM is no dependency of PAIR (the ``bench`` extra installs it);
without it ``LITELLM_MISSING`` says why and nothing here may be called.
"""

from __future__ import annotations

import os
import time
from typing import Any

from _common import LoadResult

# Its cost map is otherwise fetched from GitHub at import (retried for seconds offline).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

LITELLM_MISSING = ""
try:
    import litellm
except ImportError as error:
    LITELLM_MISSING = f"litellm is not installed ({error}); pip install -e '.[bench]'"
else:
    litellm.telemetry = False
    litellm.suppress_debug_info = True

MESSAGES = [{"role": "user", "content": "hi"}]
MAX_TOKENS = 8


async def one(base_url: str, model: str, stream: bool, result: LoadResult | None) -> None:
    """One chat through ``acompletion(model="ollama_chat/<model>")``; recorded in ``result``."""
    started = time.perf_counter()
    arrivals: list[float] = []
    answer: Any = await litellm.acompletion(
        model=f"ollama_chat/{model}",
        api_base=base_url,
        messages=MESSAGES,
        max_tokens=MAX_TOKENS,
        stream=stream,
    )
    if stream:
        async for _chunk in answer:
            arrivals.append(time.perf_counter())
    done = time.perf_counter()
    if result is None:
        return
    result.latencies.append((done - started) * 1000)
    if arrivals:
        result.first_chunks.append((arrivals[0] - started) * 1000)
        result.chunks += len(arrivals)


async def litellm_load(
    base_url: str, model: str, stream: bool, total: int, warmup: int
) -> LoadResult:
    """``total`` chats one after another (after ``warmup``): latencies and first chunks."""
    result = LoadResult()
    for _ in range(warmup):
        await one(base_url, model, stream, None)
    begin = time.perf_counter()
    for _ in range(total):
        try:
            await one(base_url, model, stream, result)
        except Exception as error:  # any failure is counted, not raised
            result.errors += 1
            result.error_sample = result.error_sample or repr(error)
    elapsed = time.perf_counter() - begin
    result.rate = len(result.latencies) / elapsed if elapsed > 0 else 0.0
    return result
