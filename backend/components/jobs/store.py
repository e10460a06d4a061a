"""The ``jobs`` table: each job's latest state, keeping a bounded history of finished ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, get_args

from backend.components.jobs.state import TERMINAL, Job, JobState
from backend.components.jobs.timeline import decode_timeline, encode_timeline
from backend.core.store import Row, Store
from backend.protocol.types.base import EngineName, JobKey, NodeId

DEFAULT_KEEP_FINISHED = 1000
COLUMNS = (
    "key",
    "engine",
    "model",
    "origin",
    "run_id",
    "path",
    "state",
    "attempt",
    "target",
    "serving",
    "created_at",
    "started_at",
    "completed_at",
    "error",
    "seq",
    "client",
    "client_address",
    "first_token_at",
    "chunks",
    "tokens",
    "note",
    "timeline",
    "updated_at",
)
# 23 columns per row: 43 rows stay under the 999 variables older SQLite builds allow.
ROWS_PER_STATEMENT = 43
KEYS_PER_STATEMENT = 500
_STATES: frozenset[str] = frozenset(get_args(JobState))
_FINISHED = ", ".join(f"'{state}'" for state in sorted(TERMINAL))
_UPDATE = ", ".join(f"{column} = excluded.{column}" for column in COLUMNS[1:])


class JobRecordStore:
    """Reads and writes the ``jobs`` table; keeps at most ``keep_finished`` finished jobs.

    Unfinished jobs are never pruned. Every call runs on the store's own thread.
    """

    def __init__(self, store: Store, keep_finished: int = DEFAULT_KEEP_FINISHED) -> None:
        if keep_finished < 1:
            raise ValueError("keep_finished must be at least 1")
        self._store = store
        self.keep_finished = keep_finished

    async def load(self) -> list[Job]:
        """Every stored job, newest first, after pruning finished ones beyond the bound."""
        await self.prune()
        rows = await self._store.fetch_all(
            f"SELECT {', '.join(COLUMNS[:-1])} FROM jobs ORDER BY created_at DESC, key DESC"
        )
        return [_job(row) for row in rows]

    async def save(self, changed: Sequence[tuple[Job, float]]) -> None:
        """Insert or update ``(job, updated_at)`` pairs, several rows per statement."""
        for start in range(0, len(changed), ROWS_PER_STATEMENT):
            chunk = changed[start : start + ROWS_PER_STATEMENT]
            row = f"({', '.join('?' * len(COLUMNS))})"
            sql = (
                f"INSERT INTO jobs ({', '.join(COLUMNS)}) VALUES {', '.join([row] * len(chunk))} "
                f"ON CONFLICT(key) DO UPDATE SET {_UPDATE}"
            )
            await self._store.execute(sql, [value for pair in chunk for value in _values(*pair)])

    async def delete(self, keys: Sequence[str]) -> None:
        """Forget these jobs."""
        for start in range(0, len(keys), KEYS_PER_STATEMENT):
            chunk = keys[start : start + KEYS_PER_STATEMENT]
            marks = ", ".join("?" * len(chunk))
            await self._store.execute(f"DELETE FROM jobs WHERE key IN ({marks})", chunk)

    async def prune(self) -> None:
        """Delete the oldest finished jobs beyond the bound."""
        await self._store.execute(
            "DELETE FROM jobs WHERE key IN (SELECT key FROM jobs "
            f"WHERE state IN ({_FINISHED}) ORDER BY created_at DESC, key DESC LIMIT -1 OFFSET ?)",
            (self.keep_finished,),
        )


def _values(job: Job, updated_at: float) -> tuple[Any, ...]:
    return (
        job.id,
        job.engine,
        job.model,
        job.origin,
        job.run_id,
        job.path,
        job.state,
        job.attempt,
        job.target,
        job.serving,
        job.created_at,
        job.started_at,
        job.completed_at,
        job.error,
        job.seq,
        job.client,
        job.client_address,
        job.first_token_at,
        job.chunks,
        job.tokens,
        job.note,
        encode_timeline(job.timeline),
        updated_at,
    )


def _job(row: Row) -> Job:
    state: JobState = row[6] if row[6] in _STATES else "failed"
    return Job(
        id=JobKey(str(row[0])),
        engine=EngineName(str(row[1])),
        model=str(row[2]),
        origin=NodeId(str(row[3])),
        run_id=str(row[4]),
        path=str(row[5]),
        state=state,
        attempt=int(row[7]),
        target=row[8],
        serving=row[9],
        created_at=float(row[10]),
        started_at=row[11],
        completed_at=row[12],
        error=row[13],
        seq=int(row[14]),
        client=row[15],
        client_address=row[16],
        first_token_at=row[17],
        chunks=row[18],
        tokens=row[19],
        note=row[20],
        timeline=decode_timeline(row[21]),
    )
