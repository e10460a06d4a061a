"""The proxy workers' journals of job ends, applied when a worker exits and when the broker starts.

A worker writes each job's end to its journal before the last byte of the answer goes out
(``backend/workers/proxy/channels/journal.py``); the broker stores ends as they come, and the
worker deletes a journal segment once the broker confirms it stored it. What is left in the
folder when a broker starts are ends an earlier broker may not have stored (it was killed):
each is applied to a job the store does not already have finished, then the files go.

Each broker run gives its workers a folder of its own under ``root``, so the broker reads only
what earlier runs left, never the journal its own new worker is writing. A worker hands a job's
start and end to the broker batched (the end after its client's last byte) and journals both,
so when a worker exits the broker reads this run's folder too (``read_current``) and applies
what it says of the jobs still open (``catch_up``) before it fails the rest.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path

import msgspec

from backend.components.jobs.reports import job_from_report, report_problem, step_of
from backend.components.jobs.state import TERMINAL, Job, apply
from backend.protocol.types.base import JobKey
from backend.protocol.types.jobs import JobEvent

log = logging.getLogger(__name__)

SUFFIX = ".jsonl"
_ENDS = frozenset({"completed", "errored"})


class JournalFolders(msgspec.Struct, frozen=True):
    """Where workers journal job ends: ``current`` for this broker run's, under ``root``."""

    root: Path
    current: Path

    @classmethod
    def for_new_run(cls, root: Path) -> JournalFolders:
        """A fresh folder for this broker run's workers (created by the first of them)."""
        return cls(root, root / secrets.token_hex(4))


class LeftEnds(msgspec.Struct, frozen=True):
    """The job ends earlier runs left, and the files and folders they were read from."""

    ends: list[JobEvent]
    files: list[Path]
    folders: list[Path]

    def remove(self) -> None:
        """Delete the files read and their folders (one still written to stays)."""
        for path in self.files:
            path.unlink(missing_ok=True)
        for folder in self.folders:
            try:
                folder.rmdir()
            except OSError as exc:
                log.debug("jobs journal: %s stays: %s", folder, exc)


def read_left(folders: JournalFolders) -> LeftEnds:
    """Every job end in the journals under ``folders.root`` but outside ``current``, in the
    order written; a line that does not read as an end (one torn by a kill) is skipped."""
    ends: list[JobEvent] = []
    files: list[Path] = []
    earlier = sorted(folder for folder in _folders(folders.root) if folder != folders.current)
    for folder in earlier:
        for path in sorted(folder.glob(f"*{SUFFIX}"), key=_segment_order):
            try:
                ends.extend(_ends_in(path))
            except OSError as exc:
                log.warning("jobs journal: %s cannot be read (%s); it stays", path, exc)
                continue
            files.append(path)
    return LeftEnds(ends, files, earlier)


def read_current(folders: JournalFolders) -> list[JobEvent]:
    """Every event in this run's own journals (``folders.current``: job starts and ends), in
    the order written: what a worker that exited wrote there may not all have reached the
    broker by its pipe."""
    events: list[JobEvent] = []
    for path in sorted(folders.current.glob(f"*{SUFFIX}"), key=_segment_order):
        try:
            events.extend(_ends_in(path))
        except OSError as exc:
            log.warning("jobs journal: %s cannot be read (%s)", path, exc)
    return events


def catch_up(jobs: Mapping[JobKey, Job], events: Iterable[JobEvent]) -> dict[JobKey, Job]:
    """The ``jobs`` (open ones) that ``events`` (a worker's journal) move on, as they are after
    them in the order written; an event of another job, or one that does not read as a
    report, changes nothing."""
    changed: dict[JobKey, Job] = {}
    for event in events:
        known = changed.get(event.key) or jobs.get(event.key)
        if known is None or report_problem(event) is not None:
            continue
        after = apply(known, step_of(event))
        if after != known:
            changed[event.key] = after
    return changed


def settle(jobs: Mapping[JobKey, Job], ends: Iterable[JobEvent]) -> dict[JobKey, Job]:
    """The jobs ``ends`` finish: each end applied to its job unless that job is finished
    already (a state never goes back); a job the store lacks is made from the end's header."""
    settled: dict[JobKey, Job] = {}
    for end in ends:
        problem = report_problem(end)
        if end.kind not in _ENDS or problem is not None:
            log.debug("jobs journal: %r skipped: %s", end.key, problem or f"a {end.kind} event")
            continue
        known = settled.get(end.key) or jobs.get(end.key) or job_from_report(end)
        if known.state in TERMINAL:
            continue
        after = apply(known, step_of(end))
        if after.state in TERMINAL:
            settled[end.key] = after
        else:
            log.debug(
                "jobs journal: %r at seq %d skipped (end seq %d)", end.key, known.seq, end.seq
            )
    return settled


def _folders(root: Path) -> list[Path]:
    try:
        return [path for path in root.iterdir() if path.is_dir()]
    except FileNotFoundError:
        return []


def _segment_order(path: Path) -> tuple[str, int]:
    """``<run id>.<n>.jsonl``: a run's segments in the order written."""
    run, _, number = path.name.removesuffix(SUFFIX).rpartition(".")
    return run, int(number) if number.isdigit() else 0


def _ends_in(path: Path) -> list[JobEvent]:
    decoder = msgspec.json.Decoder(JobEvent)
    ends: list[JobEvent] = []
    for line in path.read_bytes().splitlines():
        try:
            ends.append(decoder.decode(line))
        except msgspec.DecodeError as exc:  # a validation error is one too
            log.debug("jobs journal: a line of %s skipped: %s", path.name, exc)
    return ends
