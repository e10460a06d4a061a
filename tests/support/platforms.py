"""The ``linux_only`` marker: a test module that can only work on Linux (network namespaces and
``ip``, ``/proc``, dpkg's scripts) is skipped elsewhere, saying why, instead of failing on the
macOS and Windows CI runners for a reason that is no bug of PAIR's."""

from __future__ import annotations

import sys

import pytest

MARKER = "linux_only"


def linux_only_skip_reason(marker: pytest.Mark | None, platform: str = sys.platform) -> str | None:
    """The skip reason for a test carrying ``marker`` on ``platform``, or None when it runs:
    unmarked, or on Linux. The marker's first argument says what Linux has that is needed."""
    if marker is None or platform.startswith("linux"):
        return None
    needs = str(marker.args[0]) if marker.args else "needs Linux"
    return f"Linux only ({needs}); this is {platform}"


def skip_linux_only(items: list[pytest.Item], platform: str = sys.platform) -> None:
    """Add a skip to each of ``items`` marked ``linux_only`` when ``platform`` is not Linux."""
    for item in items:
        reason = linux_only_skip_reason(item.get_closest_marker(MARKER), platform)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
