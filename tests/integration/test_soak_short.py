"""The soak (``bench/soak.py``), short: three paired brokers under mixed traffic and chaos for
``PAIR_SOAK_DURATION`` seconds (default 120; 0 skips it), and its audit passes.

It is the suite's longest test, so it runs once per session: one test, not parametrized, and a
second call in the same session (``--count``, a rerun plugin, a loop) is skipped.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ROOT

DURATION_S = float(os.environ.get("PAIR_SOAK_DURATION", "120"))
# Bring-up, the drain of the last requests, the jobs' settling and the stop, on a loaded machine.
OVERHEAD_S = 420.0
AUDIT_PREFIX = "SOAK-AUDIT "

pytestmark = pytest.mark.slow
_ran: list[str] = []


def _audit(output: str) -> dict[str, Any]:
    lines = [line for line in output.splitlines() if line.startswith(AUDIT_PREFIX)]
    assert lines, f"no audit line in the soak's output:\n{output[-4000:]}"
    audit: dict[str, Any] = json.loads(lines[-1].removeprefix(AUDIT_PREFIX))
    return audit


def _figure(output: str, label: str) -> int:
    """A count from the printed table (``label`` then the number)."""
    found = re.search(rf"^{re.escape(label)}\s+(\d+)", output, re.MULTILINE)
    assert found, f"{label!r} is not in the soak's report"
    return int(found.group(1))


@pytest.mark.skipif(DURATION_S <= 0, reason="PAIR_SOAK_DURATION=0")
@pytest.mark.timeout(DURATION_S + OVERHEAD_S + 60)
def test_a_short_soak_under_chaos_passes_its_audit(tmp_path: Path) -> None:
    if _ran:
        pytest.skip("the soak runs once per test session")
    _ran.append("soak")
    argv = [sys.executable, str(ROOT / "bench" / "soak.py"), "--duration", f"{DURATION_S:g}"]
    argv += ["--root", str(tmp_path / "soak")]
    if seed := os.environ.get("PAIR_SOAK_SEED"):
        argv += ["--seed", seed]
    finished = subprocess.run(
        argv,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=DURATION_S + OVERHEAD_S,
    )
    output = finished.stdout + finished.stderr
    print(finished.stdout)  # the figures, shown with -s or when the test fails
    assert finished.returncode == 0, f"the soak's audit failed:\n{output[-6000:]}"
    audit = _audit(finished.stdout)
    assert audit["passed"] and all(audit["checks"].values()), audit["checks"]
    assert audit["hung"] == 0 and audit["unclear"] == 0 and audit["jobs_not_terminal"] == 0
    assert audit["ok"] > 0 and audit["sent"] == audit["ok"] + audit["clear"]
    assert _figure(finished.stdout, "unanswered or hung (must be 0)") == 0
    assert _figure(finished.stdout, "unclear error (must be 0)") == 0
    assert _figure(finished.stdout, "requests sent") == audit["sent"]
    if DURATION_S >= 60:  # the first act comes 20-40 s in
        assert audit["chaos"], "no chaos happened in the soak"
