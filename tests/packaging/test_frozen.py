"""The frozen app (PyInstaller, one folder), built once per session into ``build/frozen`` and
smoke-tested from its folder by ``packaging/smoke.py``.

Skipped when PyInstaller is not installed, unless ``PAIR_REQUIRE_PACKAGING=1`` (CI), which makes
that a failure.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.packaging.conftest import FROZEN_GROUP, ROOT

SMOKE_TIMEOUT_S = 300

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(FROZEN_GROUP)]


# The body only: the build (or the wait for another worker's) is bounded by the fixture.
@pytest.mark.timeout(SMOKE_TIMEOUT_S + 60, func_only=True)
def test_the_frozen_app_passes_the_smoke_test(frozen_pair: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "packaging" / "smoke.py"), str(frozen_pair)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SMOKE_TIMEOUT_S,
    )
    print(done.stdout)
    assert done.returncode == 0, f"smoke test failed:\n{done.stdout}\n{done.stderr}"
    assert "smoke: passed" in done.stdout
