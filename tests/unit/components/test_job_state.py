"""Job states from numbered events: In flight, Running, failover, late reports, terminal."""

from __future__ import annotations

from backend.components.jobs.state import (
    Completed,
    Errored,
    Job,
    Started,
    Submitted,
    apply,
    apply_in_order,
    interrupted,
)


def _job() -> Job:
    return Job(id="1", engine="ollama", model="llama3", origin="me", created_at=100.0)


def test_a_request_is_in_flight_until_the_engine_starts_it_then_runs_and_completes() -> None:
    job = apply(_job(), Submitted(1, 1, "gpu-box", 100.1))
    assert (job.state, job.target, job.serving) == ("in_flight", "gpu-box", None)
    job = apply(job, Started(2, 1, "gpu-box", 100.5))
    assert (job.state, job.serving, job.started_at) == ("running", "gpu-box", 100.5)
    job = apply(job, Completed(3, 1, 102.0))
    assert (job.state, job.completed_at) == ("completed", 102.0)


def test_failover_returns_a_running_job_to_in_flight_on_the_next_node() -> None:
    job = apply(apply(_job(), Submitted(1, 1, "a", 1.0)), Started(2, 1, "a", 2.0))
    job = apply(job, Submitted(3, 2, "b", 3.0))
    assert (job.state, job.attempt, job.target, job.serving, job.started_at) == (
        "in_flight",
        2,
        "b",
        None,
        None,
    )


def test_a_running_job_never_goes_back_to_waiting_within_an_attempt() -> None:
    job = apply(apply(_job(), Submitted(1, 1, "a", 1.0)), Started(2, 1, "a", 2.0))
    assert apply(job, Submitted(3, 1, None, 3.0)).state == "running"


def test_late_reports_from_a_left_attempt_are_ignored() -> None:
    job = apply(apply(_job(), Submitted(1, 1, "a", 1.0)), Submitted(2, 2, "b", 2.0))
    late = apply(job, Started(3, 1, "a", 3.0))
    assert (late.state, late.serving) == ("in_flight", None)
    assert apply(late, Errored(4, 1, 4.0, "a died")).state == "in_flight"


def test_terminal_jobs_never_move_and_old_events_change_nothing() -> None:
    done = apply(apply(_job(), Submitted(1, 1, "a", 1.0)), Errored(2, 1, 2.0, "gone", True))
    assert done.state == "cancelled"
    assert apply(done, Started(3, 1, "a", 3.0)) is done
    assert apply(done, Completed(4, 1, 4.0)) is done
    job = apply(_job(), Submitted(5, 1, "a", 1.0))
    assert apply(job, Started(5, 1, "a", 2.0)) is job, "a duplicate seq is ignored"


def test_events_are_applied_in_seq_order_and_gaps_wait() -> None:
    events = [Started(2, 1, "a", 2.0), Completed(4, 1, 4.0), Submitted(1, 1, "a", 1.0)]
    job, waiting = apply_in_order(_job(), events)
    assert (job.state, job.seq) == ("running", 2)
    assert waiting == [Completed(4, 1, 4.0)]
    job, waiting = apply_in_order(job, [*waiting, Submitted(3, 1, "a", 3.0)])
    assert (job.state, job.seq, waiting) == ("completed", 4, [])


def test_unfinished_jobs_are_marked_interrupted_after_a_restart() -> None:
    running = apply(apply(_job(), Submitted(1, 1, "a", 1.0)), Started(2, 1, "a", 2.0))
    marked = interrupted(running, 9.0)
    assert (marked.state, marked.error) == ("failed", "interrupted: PAIR stopped")
    finished = apply(running, Completed(3, 1, 3.0))
    assert interrupted(finished, 9.0) is finished
