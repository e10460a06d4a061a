"""What the GUI says about replicas: a replica planner's jobs (``replica:load`` and
``replica:unload``) and the mark of a model it loaded. Plain functions, no Qt."""

from __future__ import annotations

from backend.protocol.types.engines import ReplicaMark
from backend.protocol.types.jobs import JobRecord

REPLICA_PATHS = {"replica:load": "Load replica", "replica:unload": "Unload replica"}


def replica_job_kind(job: JobRecord) -> str | None:
    """``Load replica`` / ``Unload replica`` for a replica planner's job; None for a request."""
    return REPLICA_PATHS.get(job.path)


def replica_job_note(job: JobRecord) -> str | None:
    """What a replica planner's job did and why, on one line: ``Load replica: qwen2.5 waited
    18 s on gpu-box; loading it on laptop``, and a failed one's error first (``Load replica
    failed: out of memory — qwen2.5 waited…``); None for a request."""
    kind = replica_job_kind(job)
    if kind is None:
        return None
    note = " ".join((job.note or "").split())
    error = " ".join((job.error or "").split())
    if error:
        return f"{kind} failed: {error}" + (f" — {note}" if note else "")
    return f"{kind}: {note}" if note else kind


def idle_text(seconds: float) -> str:
    """``45 s``, ``5 min``, ``1 h 30 min``: a span as people say it."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes = round(whole / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def ago_text(seconds: float) -> str:
    """``just now``, ``3 min ago``, ``2 h ago``."""
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    return f"{int(seconds // 3600)} h ago"


def replica_mark_text(mark: ReplicaMark, now: float, by: str | None = None) -> str:
    """A replica's status on the Models page: ``Replica · loaded by PAIR 3 min ago: qwen2.5:7b
    waited 18 s on gpu-box · unloads after 5 min idle``. ``by`` names the node whose planner
    loaded it, where it is another computer."""
    who = f"PAIR on {by}" if by else "PAIR"
    parts = [f"Replica · loaded by {who} {ago_text(now - mark.loaded_at)}"]
    reason = " ".join(mark.reason.split())
    if reason:
        parts[0] += f": {reason}"
    if mark.ttl_s is not None:
        parts.append(f"unloads after {idle_text(mark.ttl_s)} idle")
    else:
        parts.append("unloaded again once idle")
    return " · ".join(parts)


def replica_mark_tooltip(mark: ReplicaMark, by: str | None = None) -> str:
    """Why the replica is there, for a tooltip: PAIR loaded it and unloads it once idle, unlike
    what the user loads."""
    who = f"PAIR's replica planner on {by}" if by else "PAIR's replica planner"
    lines = [f"{who} loaded this model to share the work of a busy model."]
    if mark.reason:
        lines.append(f"Why: {' '.join(mark.reason.split())}")
    lines.append("PAIR unloads it again once idle; what you load yourself, PAIR never unloads.")
    return "\n".join(lines)
