"""The suite's port picker: a share per xdist worker, clear of the ephemeral range."""

from __future__ import annotations

import itertools
import socket

from tests.support import ports


def test_each_worker_draws_from_its_own_share_below_the_ephemeral_range() -> None:
    shares = [
        ports.worker_span({"PYTEST_XDIST_WORKER": f"gw{n}", "PYTEST_XDIST_WORKER_COUNT": "4"})
        for n in range(4)
    ]
    assert all(low < high <= 32768 for low, high in shares)
    for (_, high), (low, _) in itertools.pairwise(shares):
        assert high <= low, f"shares overlap: {shares}"
    assert ports.worker_span({}) == (20000, 32000)


def test_a_port_is_free_in_this_workers_share_and_not_handed_out_twice() -> None:
    low, high = ports.worker_span()
    given = [ports.free_port() for _ in range(50)]
    assert len(set(given)) == 50
    if ports.span_clear_of_ephemeral():
        assert all(low <= port < high for port in given)
    assert not ports.RESERVED_PORTS & set(given)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", given[0]))  # free means a listener can take it


def test_the_worker_number_comes_from_pytest_xdist_and_is_zero_without_it() -> None:
    assert ports.worker_index({"PYTEST_XDIST_WORKER": "gw3", "PYTEST_XDIST_WORKER_COUNT": "4"}) == (
        3,
        4,
    )
    assert ports.worker_index({}) == (0, 1)
    assert ports.worker_index({"PYTEST_XDIST_WORKER": "master"}) == (0, 1)
