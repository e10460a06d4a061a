"""kill -9 of a process writing jobs, manual nodes and settings through PAIR's stores, over and
over: every commit it acknowledged is there afterwards, whole, and the stores open cleanly."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT
from tests.integration.durability import records
from tests.integration.durability.conftest import cycles, reopen

CYCLES = cycles(default=30, long=1000)
# A data dir lives this many cycles (history accumulates, recovery runs on a grown WAL), then
# the next group starts afresh so a run's size stays bounded.
GROUP_CYCLES = 25
# Some kills land while the writer opens the store (migrations, WAL recovery, the first load).
EARLY_KILL_SHARE = 0.15
MAX_RUN_S = 0.3


@dataclass
class Figures:
    """What the cycles did, printed at the end."""

    cycles: int = 0
    early_kills: int = 0
    acknowledged: int = 0
    lost: list[str] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)
    temp_files_found: int = 0
    temp_files_left: int = 0


def _start_writer(
    data_dir: Path, cycle: int, first_setting: int, out: Path
) -> subprocess.Popen[bytes]:
    module = "tests.integration.durability.store_writer"
    with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", module, str(data_dir), str(cycle), str(first_setting),
             str(cycle)],
            cwd=ROOT,
            stdout=stdout,
            stderr=stderr,
        )  # fmt: skip


def _said_ready(out: Path) -> bool:
    return out.read_bytes().startswith(b"ready\n")


async def _wait_ready(writer: subprocess.Popen[bytes], out: Path) -> None:
    deadline = time.monotonic() + 30
    while not _said_ready(out):
        assert writer.poll() is None, out.with_suffix(".err").read_text()[-2000:]
        assert time.monotonic() < deadline, "the writer never got ready"
        await asyncio.sleep(0.005)


async def _one_cycle(
    data_dir: Path, cycle: int, acked: records.Acknowledged, rng: random.Random, figures: Figures
) -> None:
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    out = data_dir.parent / "writer.out"
    writer = _start_writer(data_dir, cycle, acked.next_setting(), out)
    try:
        if rng.random() < EARLY_KILL_SHARE:
            figures.early_kills += 1
            await asyncio.sleep(rng.uniform(0.0, 0.25))
        else:
            await _wait_ready(writer, out)
            await asyncio.sleep(rng.uniform(0.0, MAX_RUN_S))
        assert writer.poll() is None, out.with_suffix(".err").read_text()[-2000:]
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    lines = records.read_lines(out)
    acked.read(lines, cycle)
    damage = records.Damage(torn=[line for line in lines if line.startswith("corrupt")])
    found = await reopen(data_dir)
    if found.quick_check != "ok" or found.database_set_aside or found.settings_corrupt:
        damage.torn.append(
            f"quick_check {found.quick_check!r}, database set aside as "
            f"{found.database_set_aside}, settings {found.settings_corrupt}"
        )
    records.check_jobs(acked, found.jobs, damage)
    records.check_nodes(acked, found.nodes, damage)
    records.check_settings(acked, found.settings, damage)
    figures.lost += [f"cycle {cycle}: {entry}" for entry in damage.lost]
    figures.torn += [f"cycle {cycle}: {entry}" for entry in damage.torn]
    figures.temp_files_found += found.temp_files_found
    figures.temp_files_left += found.temp_files_left


@pytest.mark.timeout(max(120, CYCLES * 3))
async def test_kill_9_mid_write_loses_and_tears_no_committed_record(tmp_path: Path) -> None:
    rng = random.Random(20261201)
    figures = Figures()
    started = time.monotonic()
    acked = records.Acknowledged()
    for cycle in range(CYCLES):
        if cycle % GROUP_CYCLES == 0:
            figures.acknowledged += acked.records
            acked = records.Acknowledged()
        data_dir = tmp_path / f"group{cycle // GROUP_CYCLES}" / "data"
        await _one_cycle(data_dir, cycle, acked, rng, figures)
        figures.cycles += 1
    figures.acknowledged += acked.records
    print(
        f"\nstore kill cycles: {figures.cycles} cycles ({figures.early_kills} killed while "
        f"opening), {figures.acknowledged} records acknowledged, {len(figures.lost)} lost, "
        f"{len(figures.torn)} torn, {figures.temp_files_found} settings temp files left by kills "
        f"({figures.temp_files_left} still there after loading), "
        f"{time.monotonic() - started:.1f} s"
    )
    assert not figures.lost, figures.lost[:10]
    assert not figures.torn, figures.torn[:10]
    assert figures.temp_files_left == 0, "a cut settings write leaves litter for good"
    assert figures.acknowledged > figures.cycles, "the writers acknowledged almost nothing"
