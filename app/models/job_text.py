"""What the Jobs table says about a job: its columns, state labels, engine and model names,
clock times, durations, where a job was asked and ran, when, a replica planner's job as such
(``replica_text.py``), and the timeline tooltip. Plain
functions, no Qt (the details dialog's texts are ``job_details_text.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import IntEnum
from typing import get_args

from app.models.replica_text import replica_job_kind, replica_job_note
from backend.protocol.types.jobs import MAX_ATTEMPTS, JobRecord, JobState

ALL_STATES: tuple[JobState, ...] = get_args(JobState)
TERMINAL: frozenset[JobState] = frozenset({"completed", "failed", "cancelled"})


class JobColumn(IntEnum):
    """The Jobs table's columns, in order."""

    STATE = 0
    MODEL = 1
    ENGINE = 2
    COMPUTER = 3
    TIME = 4
    DURATION = 5
    ERROR = 6


# The Time column is when each job was received: the rows are ordered by that same time.
# The last column holds a failed job's error, and a replica planner's job's reason.
TITLES = ("State", "Model", "Engine", "Computer", "Started", "Duration", "Error / note")
STATE_LABELS: dict[JobState, str] = {
    "in_flight": "In flight",
    "running": "Running",
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Cancelled",
}
ENGINE_LABELS = {"ollama": "Ollama", "lmstudio": "LM Studio", "llamacpp": "llama.cpp"}
NodeLabel = Callable[[str | None], str]


def engine_label(engine: str) -> str:
    """An engine's display name."""
    return ENGINE_LABELS.get(engine, engine)


def model_name(model: str) -> str:
    """A model without its publisher (``lmstudio-community/`` …): the tooltip has the rest."""
    return model.rstrip("/").rsplit("/", 1)[-1] or model


def clock_time(at: float, now: float) -> str:
    """``HH:MM:SS`` (local time) for today, with the day before it for older times."""
    moment, today = time.localtime(at), time.localtime(now)
    if (moment.tm_yday, moment.tm_year) == (today.tm_yday, today.tm_year):
        return time.strftime("%H:%M:%S", moment)
    return time.strftime("%d %b %H:%M:%S", moment)


def format_job_duration(seconds: float, *, live: bool = False) -> str:
    """``420 ms``, ``2.4 s``, ``12 s``, ``3 min 05 s``, ``1 h 02 min``; whole seconds while a
    job runs (the column refreshes once a second)."""
    seconds = max(0.0, seconds)
    if seconds < 1 and not live:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10 and not live:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, whole = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {whole:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def time_text(job: JobRecord, now: float) -> str:
    """When the job was received (the Started column, the time the rows are ordered by)."""
    return clock_time(job.created_at, now)


def attempt_text(job: JobRecord) -> str | None:
    """``attempt 2 of 5`` for a retried job; None for one sent once (or never)."""
    return f"attempt {job.attempt} of {MAX_ATTEMPTS}" if job.attempt > 1 else None


def state_text(job: JobRecord) -> str:
    """The State cell: the state, and the attempt once retried."""
    attempt = attempt_text(job)
    label = STATE_LABELS[job.state]
    return label if attempt is None else f"{label} · {attempt}"


def ran_on(job: JobRecord) -> str | None:
    """The node that serves or served the job, else the one it was sent to (None: neither)."""
    return job.serving or job.target


def computer_text(job: JobRecord, label: NodeLabel) -> str:
    """Where the job was asked and where it ran: ``desk → laptop``; one name when the same."""
    ran = ran_on(job)
    if ran is None or ran == job.origin:
        return label(job.origin)
    return f"{label(job.origin)} → {label(ran)}"


def computer_tooltip(job: JobRecord, label: NodeLabel) -> str:
    """The node names and ids behind the Computer cell."""
    lines = [f"Asked on {label(job.origin)} ({job.origin})"]
    ran = ran_on(job)
    if ran is not None:
        verb = "Sent to" if job.serving is None else "Ran on"
        lines.append(f"{verb} {label(ran)} ({ran})")
    return "\n".join(lines)


def cell_text(job: JobRecord, column: int, label: NodeLabel, now: float) -> str:
    """What one cell shows."""
    match column:
        case JobColumn.STATE:
            return state_text(job)
        case JobColumn.MODEL:
            return model_name(job.model)
        case JobColumn.ENGINE:
            return engine_label(job.engine)
        case JobColumn.COMPUTER:
            return computer_text(job, label)
        case JobColumn.TIME:
            return time_text(job, now)
        case JobColumn.DURATION:
            end = job.completed_at if job.completed_at is not None else now
            return format_job_duration(end - job.created_at, live=job.state not in TERMINAL)
    return " ".join(last_text(job).split())  # one line in the table


def last_text(job: JobRecord) -> str:
    """The last column: the error, or for a replica planner's job what it did and why."""
    return replica_job_note(job) or job.error or ""


def cell_tooltip(job: JobRecord, column: int, label: NodeLabel, now: float) -> str | None:
    """The details behind a cell: timings, node ids, the path, the whole error."""
    match column:
        case JobColumn.MODEL:
            shown = replica_job_kind(job) or job.path
            return f"{job.model}\n{shown}" if shown else job.model
        case JobColumn.COMPUTER:
            return computer_tooltip(job, label)
        case JobColumn.TIME | JobColumn.DURATION:
            return _timeline(job, label, now)
        case JobColumn.ERROR:
            return last_text(job) or None
    return None


def _timeline(job: JobRecord, label: NodeLabel, now: float) -> str:
    lines = [f"Received {clock_time(job.created_at, now)} from {label(job.origin)}"]
    if job.target is not None:
        attempt = attempt_text(job)
        lines.append(f"Sent to {label(job.target)}" + (f" ({attempt})" if attempt else ""))
    elif job.completed_at is not None:
        lines.append("Never reached a computer")
    if job.started_at is not None:
        waited = format_job_duration(job.started_at - job.created_at)
        lines.append(
            f"Started on {label(job.serving)} at {clock_time(job.started_at, now)} after {waited}"
        )
    if job.completed_at is not None:
        took = format_job_duration(job.completed_at - (job.started_at or job.created_at))
        verb = "Ran" if job.started_at is not None else "Waited"
        ended = STATE_LABELS[job.state].lower()
        lines.append(f"{verb} {took}, {ended} at {clock_time(job.completed_at, now)}")
    shown = replica_job_kind(job) or job.path
    lines.append(f"{shown}  ·  job {job.key}" if shown else f"Job {job.key}")
    return "\n".join(lines)
