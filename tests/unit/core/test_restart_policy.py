"""The restart decision: 1, 2, 4, 8, 16 s, five attempts, reset after 60 s healthy."""

from backend.core.restart_policy import (
    GiveUp,
    Restart,
    RestartPolicy,
    Streak,
    decide_after_exit,
    not_ready_delay,
)


def test_backoff_doubles_then_gives_up_after_five_attempts() -> None:
    policy = RestartPolicy()
    streak = Streak()
    delays = []
    for _ in range(5):
        streak, decision = decide_after_exit(policy, streak, ran_for=0.5)
        assert isinstance(decision, Restart)
        delays.append(decision.delay)
    assert delays == [1, 2, 4, 8, 16]
    streak, decision = decide_after_exit(policy, streak, ran_for=0.5)
    assert decision == GiveUp(5)


def test_a_healthy_run_of_sixty_seconds_resets_the_streak() -> None:
    policy = RestartPolicy()
    streak = Streak(attempts=4)
    streak, decision = decide_after_exit(policy, streak, ran_for=60.0)
    assert decision == Restart(1.0, 1)
    streak, decision = decide_after_exit(policy, streak, ran_for=59.9)
    assert decision == Restart(2.0, 2)


def test_not_ready_backoff_is_capped_and_never_gives_up() -> None:
    policy = RestartPolicy()
    assert [not_ready_delay(policy, tries) for tries in range(7)] == [1, 2, 4, 8, 16, 16, 16]
