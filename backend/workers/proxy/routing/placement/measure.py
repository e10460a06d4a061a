"""What the router learns from the jobs it routed: speed, first token and load time per node
and model, and each model's mean answer length.

A completed, streamed job gives its generation speed (records after the first, over the time
from the first record to the last; or Ollama's own ``eval_count`` / ``eval_duration`` from its
final record when present). The time from dispatch to the first body byte is a first-token
sample when the request found a free slot and the model resident, and (minus the first-token
estimate) a load-time sample when it found a free slot and the model not resident; a request
that had to queue says nothing about either. Each figure is a moving average (``ALPHA``) with
the time of its last sample, so placement can let an old figure decay.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import msgspec

from backend.workers.proxy.routing.placement.inputs import NodeId, Pace

ALPHA = 0.3
CAPACITY = 4_096
LINE_CAP = 64 * 1024
_NS = 1_000_000_000


class _Figures(msgspec.Struct):  # updated in place: it is never handed out (``pace`` copies it)
    tokens_per_s: float | None = None
    first_token_s: float | None = None
    load_s: float | None = None
    measured_at: float = 0.0


_UNMEASURED = Pace()


def _average(old: float | None, new: float) -> float:
    return new if old is None else ALPHA * new + (1 - ALPHA) * old


class SpeedBook:
    """Measured figures per (node, model), bounded (the least recently measured go first)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._figures: OrderedDict[tuple[NodeId, str], _Figures] = OrderedDict()
        self._answers: dict[str, float] = {}

    def pace(self, node: NodeId, model: str, now: float) -> Pace:
        """What is known of ``model`` on ``node`` (``now``: the clock the samples used)."""
        found = self._figures.get((node, model))
        if found is None:
            return _UNMEASURED
        return Pace(found.tokens_per_s, found.first_token_s, found.load_s, now - found.measured_at)

    def answer_tokens(self, model: str) -> float | None:
        """The model's mean answer length so far, in tokens."""
        return self._answers.get(model)

    def generated(self, node: NodeId, model: str, tokens: int, seconds: float, now: float) -> None:
        """A completed job generated ``tokens`` in ``seconds`` on ``node``."""
        if tokens <= 0:
            return
        self._answers[model] = _average(self._answers.get(model), float(tokens))
        if seconds <= 0 or tokens < 2:
            return
        found = self._figures.get((node, model)) or _Figures()
        found.tokens_per_s = _average(found.tokens_per_s, tokens / seconds)
        found.measured_at = now
        self._store(node, model, found)

    def first_byte(
        self, node: NodeId, model: str, seconds: float, *, cold: bool, now: float
    ) -> None:
        """A request that found a free slot got its first byte ``seconds`` after dispatch."""
        found = self._figures.get((node, model)) or _Figures()
        if cold:
            first = found.first_token_s or 0.0
            found.load_s = _average(found.load_s, max(0.0, seconds - first))
        else:
            found.first_token_s = _average(found.first_token_s, max(0.0, seconds))
        found.measured_at = now
        self._store(node, model, found)

    def _store(self, node: NodeId, model: str, figures: _Figures) -> None:
        key = (node, model)
        self._figures[key] = figures
        self._figures.move_to_end(key)
        while len(self._figures) > self._capacity:
            self._figures.popitem(last=False)


class OutputMeter:
    """Counts a streamed response's records and times the first and the last.

    Cheap per chunk (it is called for every one): records are counted by their line ends
    (NDJSON) or ``data:`` fields (SSE, told by the first chunk; ``[DONE]`` is not a record), and
    only the last two chunks are kept, for the final record Ollama puts its own counts in.
    """

    __slots__ = ("_before", "_clock", "_last", "_sse", "first_at", "last_at", "records")

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock
        self.records = 0
        self.first_at: float | None = None
        self.last_at: float | None = None
        self._sse: bool | None = None
        self._before = b""
        self._last = b"\n"  # the body starts at a line's start

    def feed(self, chunk: bytes, now: float | None = None) -> None:
        """Account for one chunk of the body, received at ``now`` (default: the clock's now)."""
        if not chunk:
            return
        if self._sse is None:
            self._sse = chunk.startswith(_SSE_STARTS)
        last = self._last
        if self._sse:
            # A field starts a line; one cut by the chunk boundary is found across it (each
            # edge is too short to hold a whole match on either side).
            count = (
                chunk.count(b"\ndata:")
                + (last[-5:] + chunk[:5]).count(b"\ndata:")
                - chunk.count(b"data: [DONE]")
                - (last[-11:] + chunk[:11]).count(b"data: [DONE]")
            )
        else:
            count = chunk.count(b"\n")
        self._before, self._last = last, chunk
        self.records += count  # less than 0 when a [DONE] counted as a field is complete
        if count > 0:
            if now is None:
                now = self._clock() if self._clock is not None else 0.0
            if self.first_at is None:
                self.first_at = now
            self.last_at = now

    def generation(self) -> tuple[int, float] | None:
        """Tokens generated and the seconds they took, when the response says or shows it."""
        tail = (self._before + self._last).rstrip()
        reported = _ollama_eval(tail[tail.rfind(b"\n") + 1 :][-LINE_CAP:].strip())
        if reported is not None:
            return reported
        if self.records < 2 or self.first_at is None or self.last_at is None:
            return None
        return self.records - 1, self.last_at - self.first_at


_SSE_STARTS = (b"data:", b"event:", b":", b"id:", b"retry:")


class _Eval(msgspec.Struct):
    """The two fields of Ollama's final record that count its generation (the rest, its
    context tokens among them, is skipped unread)."""

    eval_count: int | None = None
    eval_duration: int | None = None


_EVAL = msgspec.json.Decoder(_Eval)


def _ollama_eval(line: bytes) -> tuple[int, float] | None:
    """Ollama's final record counts the tokens it generated and how long they took."""
    if b"eval_duration" not in line:
        return None
    try:
        record = _EVAL.decode(line)
    except msgspec.DecodeError:  # not an object, or either field not an integer
        return None
    count, duration = record.eval_count, record.eval_duration
    if count is None or duration is None or duration <= 0:
        return None
    return count, duration / _NS
