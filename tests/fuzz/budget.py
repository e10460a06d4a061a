"""How many inputs each fuzz test generates, and the time and memory bound on every one.

The default suite runs ``DEFAULT_EXAMPLES`` inputs per parser (a few seconds each);
``PAIR_FUZZ_EXAMPLES=100000`` runs the long variant. Generation is derandomized and no
example database is kept, so a run is the same on every machine and in CI.
"""

from __future__ import annotations

import contextlib
import os
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
import pytest
from hypothesis import HealthCheck, settings

DEFAULT_EXAMPLES = 2000
EXAMPLES = int(os.environ.get("PAIR_FUZZ_EXAMPLES", str(DEFAULT_EXAMPLES)))
# HTTP requests against a running door cost milliseconds each: a fiftieth of the parser count.
HTTP_EXAMPLES = int(os.environ.get("PAIR_FUZZ_HTTP_EXAMPLES", str(max(200, EXAMPLES // 50))))
# A parser that takes this long on one input of at most a few MiB is stuck, not slow.
PER_EXAMPLE_S = 10.0


def fuzz_settings(examples: int = EXAMPLES) -> settings:
    """Reproducible Hypothesis settings: fixed generation, no database, no wall-clock deadline
    (the machine is shared; ``Bounds`` catches an input that hangs)."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


def timeout_for(examples: int, per_example_s: float) -> pytest.MarkDecorator:
    """pytest-timeout's bound for a whole fuzz test: the last resort against a hang."""
    return pytest.mark.timeout(120 + examples * per_example_s)


@dataclass
class Bounds:
    """Time and memory of every example of one fuzz test (memory is traced per example only,
    so Hypothesis's own generation is neither slowed nor counted)."""

    name: str
    peak_limit: int
    retained_limit: int = 1 << 20
    examples: int = 0
    slowest_s: float = 0.0
    peak_bytes: int = 0
    retained_bytes: int = 0

    @contextlib.contextmanager
    def example(self) -> Iterator[None]:
        """Run one input: it must finish within ``PER_EXAMPLE_S``, allocate at most
        ``peak_limit`` bytes at once and keep at most ``retained_limit`` once it is done."""
        tracemalloc.start()
        started = time.perf_counter()
        try:
            yield
            elapsed = time.perf_counter() - started
            retained, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.examples += 1
        self.slowest_s = max(self.slowest_s, elapsed)
        self.peak_bytes = max(self.peak_bytes, peak)
        self.retained_bytes = max(self.retained_bytes, retained)
        assert elapsed < PER_EXAMPLE_S, f"{self.name}: one input took {elapsed:.1f} s"
        assert peak < self.peak_limit, f"{self.name}: one input allocated {peak} bytes"
        assert retained < self.retained_limit, f"{self.name}: one input kept {retained} bytes"


@contextlib.contextmanager
def measured(name: str, peak_limit: int, rss_growth_limit: int = 512 << 20) -> Iterator[Bounds]:
    """Bounds for a whole fuzz test; afterwards print its figures and check that the process
    did not grow by more than ``rss_growth_limit`` (Hypothesis's own bookkeeping included)."""
    process = psutil.Process()
    rss_before = process.memory_info().rss
    bounds = Bounds(name, peak_limit)
    started = time.perf_counter()
    yield bounds
    total_s = time.perf_counter() - started
    rss_after = process.memory_info().rss
    print(
        f"\nFUZZ {name}: {bounds.examples} inputs in {total_s:.1f} s, slowest "
        f"{bounds.slowest_s * 1000:.1f} ms, peak per input {bounds.peak_bytes / 2**20:.2f} MiB, "
        f"kept per input {bounds.retained_bytes} B, "
        f"RSS {rss_before / 2**20:.0f} -> {rss_after / 2**20:.0f} MiB"
    )
    growth = rss_after - rss_before
    assert growth < rss_growth_limit, f"{name}: RSS grew by {growth >> 20} MiB"
