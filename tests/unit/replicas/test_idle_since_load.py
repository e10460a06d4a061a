"""A replica's idle time counts from its load when the model's last use here came before it."""

from __future__ import annotations

from backend.components.replicas.plan import Policy, Replica, Unload, plan_unloads

POLICY = Policy(ttl_s=10.0)


def test_a_use_from_before_the_load_does_not_age_the_replica() -> None:
    # Served here at 100 (then unloaded), loaded again as a replica at 115 after a long load.
    replica = Replica(engine="ollama", name="m", loaded_at=115.0, last_used_at=100.0)
    assert plan_unloads((replica,), POLICY, now=120.0) == []
    assert plan_unloads((replica,), POLICY, now=125.0) == [
        Unload(engine="ollama", name="m", reason="idle for 10 s (TTL 10 s)")
    ]


def test_a_use_after_the_load_counts_from_that_use() -> None:
    replica = Replica(engine="ollama", name="m", loaded_at=100.0, last_used_at=112.0)
    assert plan_unloads((replica,), POLICY, now=121.0) == []
    assert [u.name for u in plan_unloads((replica,), POLICY, now=122.5)] == ["m"]
