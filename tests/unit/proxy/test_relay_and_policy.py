"""The relay board peers poll for a request's start, and the retry policy from the environment."""

from __future__ import annotations

import asyncio
import logging

import pytest

from backend.workers.proxy.relay.serving import RelayBoard, relay_key
from backend.workers.proxy.routing.failover import RetryPolicy
from backend.workers.proxy.service import retry_policy

BACKOFF = "PAIR_PROXY_RETRY_BACKOFF_S"
WRITE_DEADLINE = "PAIR_PROXY_WRITE_DEADLINE_S"
# Long enough that a poll answered by an event never reaches it.
LONG_S = 30.0


async def _poll_soon(board: RelayBoard, key: str, attempt: int) -> asyncio.Task[dict[str, bool]]:
    task = asyncio.ensure_future(board.wait(key, attempt, LONG_S))
    await asyncio.sleep(0)
    assert not task.done()
    return task


async def test_a_poll_answers_once_the_request_holds_a_slot() -> None:
    board = RelayBoard()
    board.serving("peer/r/1@1", 1)
    poll = await _poll_soon(board, "peer/r/1@1", 1)
    board.started("peer/r/1@1", 1)
    assert await asyncio.wait_for(poll, 1.0) == {"started": True, "ended": False}
    assert len(board) == 1  # still served here until it ends
    board.ended("peer/r/1@1", 1)
    assert len(board) == 0


async def test_a_poll_after_the_start_answers_at_once() -> None:
    board = RelayBoard()
    board.serving("k", 1)
    board.started("k", 1)
    assert await asyncio.wait_for(board.wait("k", 1, LONG_S), 1.0) == {
        "started": True,
        "ended": False,
    }


async def test_a_poll_answers_when_the_request_ends_before_it_runs() -> None:
    board = RelayBoard()
    board.serving("k", 2)
    poll = await _poll_soon(board, "k", 2)
    board.ended("k", 2)
    assert await asyncio.wait_for(poll, 1.0) == {"started": False, "ended": True}
    assert len(board) == 0


async def test_every_waiting_poll_is_answered() -> None:
    board = RelayBoard()
    board.serving("k", 1)
    polls = [await _poll_soon(board, "k", 1) for _ in range(3)]
    board.started("k", 1)
    answers = await asyncio.wait_for(asyncio.gather(*polls), 1.0)
    assert answers == [{"started": True, "ended": False}] * 3


async def test_a_poll_times_out_with_neither_and_the_request_stays_on_the_board() -> None:
    board = RelayBoard()
    board.serving("k", 1)
    assert await board.wait("k", 1, 0.01) == {"started": False, "ended": False}
    assert len(board) == 1
    board.started("k", 1)
    assert await asyncio.wait_for(board.wait("k", 1, LONG_S), 1.0) == {
        "started": True,
        "ended": False,
    }


async def test_a_poll_for_an_unknown_request_leaves_nothing_behind() -> None:
    board = RelayBoard()
    assert await board.wait("nobody", 1, 0.01) == {"started": False, "ended": False}
    assert len(board) == 0


async def test_a_request_that_arrives_during_a_poll_is_kept_after_it() -> None:
    board = RelayBoard()
    poll = await _poll_soon(board, "k", 1)
    board.serving("k", 1)
    board.started("k", 1)
    assert await asyncio.wait_for(poll, 1.0) == {"started": True, "ended": False}
    assert len(board) == 1
    board.ended("k", 1)
    assert len(board) == 0


async def test_attempts_of_one_job_are_separate() -> None:
    board = RelayBoard()
    board.serving("k", 1)
    board.serving("k", 2)
    board.started("k", 1)
    assert await board.wait("k", 2, 0.01) == {"started": False, "ended": False}
    board.ended("k", 1)
    assert len(board) == 1


def test_reports_for_a_request_not_on_the_board_are_ignored() -> None:
    board = RelayBoard()
    board.started("k", 1)
    board.ended("k", 1)
    assert len(board) == 0


def test_relay_key_names_the_peer_job_and_attempt() -> None:
    assert relay_key("node-b/r9/4", 2) == "node-b/r9/4@2"
    assert relay_key("node-b/r9/4", 1) != relay_key("node-b/r9/4", 2)


def test_retry_policy_defaults_without_the_environment() -> None:
    assert retry_policy({}) == RetryPolicy()


def test_retry_policy_takes_the_backoff_and_write_deadline_from_the_environment() -> None:
    policy = retry_policy({BACKOFF: "0.1,0.2, 0.5", WRITE_DEADLINE: "2.5"})
    assert policy.schedule == (0.1, 0.2, 0.5)
    assert policy.write_deadline_s == 2.5
    assert (policy.max_dispatches, policy.deadline_s) == (
        RetryPolicy().max_dispatches,
        RetryPolicy().deadline_s,
    )


def test_a_zero_backoff_is_allowed() -> None:
    assert retry_policy({BACKOFF: "0"}).schedule == (0.0,)


def test_each_setting_falls_back_on_its_own() -> None:
    policy = retry_policy({BACKOFF: "soon", WRITE_DEADLINE: "4"})
    assert (policy.schedule, policy.write_deadline_s) == (RetryPolicy().schedule, 4.0)
    policy = retry_policy({BACKOFF: "0.5", WRITE_DEADLINE: "soon"})
    assert (policy.schedule, policy.write_deadline_s) == ((0.5,), RetryPolicy().write_deadline_s)


@pytest.mark.parametrize("text", ["", "soon", "1,,2", "1,-2", "-1", " , "])
def test_a_bad_backoff_falls_back_to_the_default(
    text: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        assert retry_policy({BACKOFF: text}).schedule == RetryPolicy().schedule
    if text:
        assert BACKOFF in caplog.text


@pytest.mark.parametrize("text", ["", "0", "-3", "soon", "nan"])
def test_a_bad_write_deadline_falls_back_to_the_default(text: str) -> None:
    assert retry_policy({WRITE_DEADLINE: text}).write_deadline_s == RetryPolicy().write_deadline_s


def test_a_nan_backoff_falls_back_to_the_default() -> None:
    assert retry_policy({BACKOFF: "nan"}).schedule == RetryPolicy().schedule
