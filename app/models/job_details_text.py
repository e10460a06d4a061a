"""What a job's details say: the client's API and who asked, time to first token, tokens and
tokens/s, and the timeline's lines. Plain functions, no Qt."""

from __future__ import annotations

from collections.abc import Sequence

from app.models.job_text import (
    STATE_LABELS,
    TERMINAL,
    NodeLabel,
    attempt_text,
    clock_time,
    engine_label,
    format_job_duration,
)
from app.models.replica_text import replica_job_kind
from backend.protocol.types.jobs import JobRecord, JobState, JobStep

LOOPBACK_CLIENT = "loopback"
# A row of the timeline: the clock time, the time since the job was received, what happened.
TimelineRow = tuple[str, str, str]


def api_text(path: str) -> str:
    """The client API a request path belongs to, with the path: ``OpenAI (/v1/chat/…)``."""
    if not path:
        return "Not recorded"
    if path.startswith("/api/"):
        api = "Ollama"
    elif path.startswith("/v1/messages"):
        api = "Anthropic"
    else:
        api = "OpenAI"
    return f"{api} ({path})"


def client_text(job: JobRecord, label: NodeLabel) -> str:
    """Who asked, at the computer the request came to."""
    if job.client is None:
        return f"Not known here ({label(job.origin)}'s own job list names it)"
    if job.client == LOOPBACK_CLIENT:
        return f"A program on {label(job.origin)} (loopback)"
    address = f" from {job.client_address}" if job.client_address else ""
    return f'API key "{job.client}"{address}'


def first_token_text(job: JobRecord) -> str:
    """How long the client waited for the first byte of its answer."""
    if job.first_token_at is None:
        return "Not measured" if job.state in TERMINAL else "No output yet"
    return format_job_duration(job.first_token_at - job.created_at)


def tokens_text(job: JobRecord) -> str:
    """The engine's token count, else a stream's chunks, else why there is no count."""
    if job.tokens is not None:
        return str(job.tokens)
    if job.chunks is not None:
        return f"about {job.chunks} (streamed chunks)"
    if job.state not in TERMINAL:
        return "Counted when the answer ends"
    return "Not counted (no streamed answer)"


def rate_text(job: JobRecord) -> str:
    """Tokens per second from the first token to the end, where both are known."""
    count = job.tokens if job.tokens is not None else job.chunks
    if count is None or job.first_token_at is None or job.completed_at is None:
        return "Not known"
    span = job.completed_at - job.first_token_at
    if span <= 0 or count < 2:
        return "Not known (the answer came at once)"
    rate = f"{count / span:.1f} tokens/s"
    return rate if job.tokens is not None else f"about {rate}"


def detail_rows(job: JobRecord, label: NodeLabel, now: float) -> list[tuple[str, str]]:
    """The facts of the details dialog, in order: (label, value)."""
    end = job.completed_at if job.completed_at is not None else now
    ran = job.serving or job.target
    kind = replica_job_kind(job)
    asked = [("Client API", api_text(job.path)), ("Client", client_text(job, label))]
    if kind is not None:  # PAIR's replica planner asked, not a client
        asked = [("Action", kind), ("Why", " ".join((job.note or "Not recorded").split()))]
    return [
        ("State", STATE_LABELS[job.state]),
        ("Model", job.model),
        ("Engine", engine_label(job.engine) if job.engine else "None (never sent)"),
        *asked,
        ("Asked on", label(job.origin)),
        ("Ran on", label(ran) if ran is not None else "No computer"),
        ("Attempts", attempt_text(job) or ("1" if job.attempt == 1 else "None")),
        ("Started", clock_time(job.created_at, now)),
        ("Duration", format_job_duration(end - job.created_at, live=job.state not in TERMINAL)),
        ("Time to first token", first_token_text(job)),
        ("Tokens", tokens_text(job)),
        ("Tokens/s", rate_text(job)),
        ("Job", job.key),
    ]


def timeline_rows(
    job: JobRecord, steps: Sequence[JobStep], label: NodeLabel, now: float
) -> list[TimelineRow]:
    """The job's timeline, oldest first: received, each event (``steps``; where there are none,
    what the record says: started, ended) and the first token sent to the client."""
    moments = [(job.created_at, "Received (queued)")]
    if steps:
        moments += [(step.at, _step_text(step, label)) for step in steps]
    else:
        if job.started_at is not None:
            moments.append((job.started_at, f"Running on {label(job.serving)}"))
        if job.completed_at is not None:
            moments.append((job.completed_at, _ended(job.state, job.error)))
    if job.first_token_at is not None:
        moments.append((job.first_token_at, "First token sent to the client"))
    moments.sort(key=lambda moment: moment[0])  # stable: events of one instant keep their order
    return [
        (clock_time(at, now), "+" + format_job_duration(at - job.created_at), text)
        for at, text in moments
    ]


def _step_text(step: JobStep, label: NodeLabel) -> str:
    attempt = f"attempt {step.attempt}"
    match step.kind:
        case "submitted" if step.node is not None:
            return f"Sent to {label(step.node)} ({attempt})"
        case "submitted" if step.attempt == 0:
            return "Answered by the door itself"
        case "submitted":
            return f"Waiting to try again ({attempt})"
        case "started":
            return f"Running on {label(step.node)} ({attempt})"
        case "completed":
            return "Completed"
        case _:
            return _ended("cancelled" if step.cancelled else "failed", step.error)


def _ended(state: JobState, error: str | None) -> str:
    text = STATE_LABELS[state]
    return f"{text}: {error}" if error and state != "completed" else text
