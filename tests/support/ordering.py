"""The order tests are handed to pytest-xdist's workers, so that a run ends when its work does.

Under ``--dist loadgroup`` (pyproject's ``addopts``) a worker is given one test (or one group)
at a time as it frees up, in collection order. So the long tests go first: the ``slow`` marker,
and the modules that start several brokers. Left where the alphabet puts them, they started in
the last minutes of a run while three workers sat idle, for about a third of its time.

A test that shares a module- or class-scoped fixture is grouped with its module
(``xdist_group``), so that fixture (a built package, a running engine, a proxy) is made once on
one worker rather than once on every worker that happens to get one of its tests.
"""

from __future__ import annotations

import pytest

# Modules whose tests each take ten seconds or more on this project's 2-core machine (several
# brokers, namespaces, real pairing), measured with ``--durations=0``; bench/README.md,
# "Suite time", has the figures.
HEAVY_MODULES = frozenset(
    {
        "tests/integration/cluster/test_cli_pairing.py",
        "tests/integration/cluster/test_link_faults.py",
        "tests/integration/cluster/test_cluster_services.py",
        "tests/integration/cluster/test_three_nodes.py",
        "tests/integration/cluster/test_spread_model.py",
        "tests/integration/cluster/test_every_model_cluster.py",
        "tests/integration/cluster/test_identity.py",
        "tests/integration/discovery/test_discovery_settings_netns.py",
        "tests/integration/discovery/test_multicast_netns.py",
        "tests/integration/proxy/test_key_scopes.py",
        "tests/integration/proxy/test_lan_access.py",
        "tests/integration/test_demo.py",
        "tests/gui/test_playground_real.py",
        "tests/gui/test_cluster_real.py",
    }
)
SHARED_SCOPES = frozenset({"module", "class", "package"})


def module_path(item: pytest.Item) -> str:
    """The test's file, as its node id names it (``tests/…/test_x.py``)."""
    return item.nodeid.split("::", 1)[0]


def rank(item: pytest.Item) -> int:
    """When ``item`` starts: 0 for the ``slow`` marker (a minute or more: the package, the
    soak, real backoff schedules), 1 for a heavy module's test, 2 for the rest."""
    if item.get_closest_marker("slow") is not None:
        return 0
    return 1 if module_path(item) in HEAVY_MODULES else 2


def shares_a_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` uses a fixture that lives longer than one test but not the session."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        definitions[-1].scope in SHARED_SCOPES for definitions in info.name2fixturedefs.values()
    )


def order_for_workers(items: list[pytest.Item]) -> None:
    """Group the tests that share a module's fixture by module, then put the long tests first
    (a stable sort by ``rank``: each part keeps its collection order)."""
    for item in items:
        if shares_a_fixture(item) and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(module_path(item)))
    items.sort(key=rank)
