"""A process that writes to PAIR's own stores without pause until it is killed.

``python -m tests.integration.durability.store_writer DATA_DIR CYCLE FIRST_SETTING SEED``
opens ``pair.db`` and ``settings.json`` in DATA_DIR the way the broker does, prints ``ready``,
then runs three writers at once, as the broker would: jobs (batches of new and advancing
jobs through ``JobRecordStore.save``), manual nodes (``ManualNodeStore`` inserts and deletes)
and settings (``SettingsService.update``, which blocks the loop as in the broker). Each line
is printed only after its commit returned (``J key seq``, ``M+ n``, ``M- id``, ``S n``); an
operation that may be cut is announced first (``M?+ n``, ``M?- id``, ``S? n``). The contents
of every record follow from its id (``records.py``), so the test can check them after a kill.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

from backend.components.discovery.manual import ManualNodeStore
from backend.components.jobs.store import JobRecordStore
from backend.components.settings.service import SettingsService
from backend.core.clock import SystemClock
from backend.core.store import Store
from tests.integration.durability import records

# Up to 60 rows per save: more than one statement's worth (ROWS_PER_STATEMENT is 50).
MAX_BATCH = 60


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


async def write_jobs(jobs: JobRecordStore, cycle: int, rng: random.Random) -> None:
    """New jobs and later events of open ones, saved in batches."""
    open_jobs: dict[str, int] = {}
    number = 0
    while True:
        batch: dict[str, int] = {}
        for _ in range(rng.randint(1, MAX_BATCH)):
            if open_jobs and rng.random() < 0.6:
                key = rng.choice(list(open_jobs))
                batch[key] = open_jobs[key] + 1
            else:
                number += 1
                batch[records.job_key(cycle, number)] = 1
        clock = SystemClock()
        await jobs.save(
            [(records.expected_job(key, seq), clock.wall()) for key, seq in batch.items()]
        )
        for key, seq in batch.items():
            if seq < records.LAST_SEQ:
                open_jobs[key] = seq
            else:
                open_jobs.pop(key, None)
        _say("\n".join(f"J {key} {seq}" for key, seq in batch.items()))


async def write_nodes(nodes: ManualNodeStore, cycle: int, rng: random.Random) -> None:
    """Manual nodes added, and now and then one of them removed."""
    added: list[str] = []
    number = 0
    while True:
        if added and rng.random() < 0.2:
            node_id = added.pop(rng.randrange(len(added)))
            _say(f"M?- {node_id}")
            await nodes.delete(node_id)
            _say(f"M- {node_id}")
            continue
        number += 1
        node = records.manual_node_for(cycle, number)
        _say(f"M?+ {number}")
        await nodes.insert(node)
        added.append(node.id)
        _say(f"M+ {number}")


async def write_settings(settings: SettingsService, first: int) -> None:
    """Settings updates, two keys at a time, as fast as the file can be replaced."""
    number = first
    while True:
        _say(f"S? {number}")
        settings.update(records.settings_values(number))
        _say(f"S {number}")
        number += 1
        await asyncio.sleep(0)


async def main(data_dir: Path, cycle: int, first_setting: int, seed: int) -> None:
    rng = random.Random(seed)
    store = Store(data_dir / records.DATABASE_FILE)
    await store.open()
    settings = SettingsService(
        data_dir / records.SETTINGS_FILE,
        clock=SystemClock(),
        on_change=lambda _: None,
        on_corrupt=lambda message: _say(f"corrupt {message}"),
    )
    settings.load()
    jobs = JobRecordStore(store, keep_finished=records.KEEP_FINISHED)
    await jobs.load()  # what the broker does at start (prunes, reads every row)
    _say("ready")
    async with asyncio.TaskGroup() as group:
        group.create_task(write_jobs(jobs, cycle, rng))
        group.create_task(write_nodes(ManualNodeStore(store), cycle, rng))
        group.create_task(write_settings(settings, first_setting))


if __name__ == "__main__":
    directory, cycle_text, first_text, seed_text = sys.argv[1:5]
    asyncio.run(main(Path(directory), int(cycle_text), int(first_text), int(seed_text)))
