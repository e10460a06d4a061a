"""The replica planner's block of ``pair status``: its mode and limits, then one line per
replica it manages (pure; ``now`` is passed in so the durations can be tested)."""

from __future__ import annotations

from backend.protocol.types.replicas import ReplicaInfo, ReplicasStatus

MODE_TEXT = {
    "auto": "auto (on while the cluster has more than one member)",
    "on": "on",
    "off": "off",
}


def replicas_lines(replicas: ReplicasStatus | None, now: float) -> list[str]:
    """The block's lines; none for a broker that does not report replicas."""
    if replicas is None:
        return []
    state = "active" if replicas.active else "not active"
    lines = [
        f"replicas    {MODE_TEXT.get(replicas.mode, replicas.mode)}: {state}",
        f"            load another copy when a request would wait over"
        f" {_duration(replicas.target_wait_s)}; unload one PAIR loaded after"
        f" {_duration(replicas.ttl_s)} unused; at most {replicas.max_per_model}"
        " computers per model",
    ]
    if not replicas.replicas:
        lines.append("            no replicas loaded by PAIR")
    lines.extend(replica_line(replica, now) for replica in replicas.replicas)
    return lines


def replica_line(replica: ReplicaInfo, now: float) -> str:
    """``model on node (engine[, as name]): state for 3 min: reason[; error]``."""
    named = f", as {replica.name}" if replica.name != replica.model else ""
    since = _duration(max(0.0, now - replica.since))
    line = (
        f"  {replica.model} on {replica.node_name} ({replica.engine}{named}):"
        f" {replica.state} for {since}: {replica.reason}"
    )
    return f"{line}; {replica.error}" if replica.error else line


def _duration(seconds: float) -> str:
    """``45 s``, ``5 min``, ``2 h 10 min``, ``3 d``: whole units, as people say them."""
    whole = round(seconds)
    if whole < 120:
        return f"{whole} s"
    minutes = whole // 60
    if minutes < 120:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {rest} min" if rest else f"{hours} h"
    return f"{hours // 24} d"
