"""What "Reset app data" deletes from a data folder, and the deletion itself (plain functions,
blocking: run them in a thread).

Only names PAIR itself writes are touched, each directly inside the data folder (plus the log
files of the log folder); a link is removed as a link, never followed, so nothing outside the
folder can be reached through one. Everything else in the folder is left alone."""

from __future__ import annotations

import logging
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import msgspec

log = logging.getLogger(__name__)


class DataKind(msgspec.Struct, frozen=True):
    """One kind of app data: its entry name in the data folder and what it holds."""

    name: str
    holds: str


# What is deleted: each name, and its set-aside copies (``pair.db.corrupt-…``, ``pair.db-wal``).
DELETED: tuple[DataKind, ...] = (
    DataKind("settings.json", "the service's settings"),
    DataKind(
        "pair.db",
        "jobs history, API keys, cluster membership, the other members' pinned certificates "
        "and the computers added by address",
    ),
    DataKind("jobs-journal", "the jobs journal (jobs history)"),
    DataKind(
        "identity",
        "this computer's identity and certificate (other members will see a "
        "new computer that must pair again)",
    ),
    DataKind("broker.json", "the record of the last service run"),
    DataKind("broker.lock", "the service's lock file"),
)
MODELS = DataKind("models", "the models PAIR keeps for its engines (llama.cpp's store)")
KEPT_NOTE = (
    "Kept: the models PAIR keeps (unless ticked above), engines PAIR installed (the engines "
    "folder), the models Ollama and LM Studio keep in their own folders, and any other file "
    "in the folder."
)
LOG_SUFFIX = ".log"  # rotated copies end in .log.1, .log.2, …
OPEN_LOG = "app.log"  # this app writes it now: emptied, not removed, so it goes on logging


class ResetOutcome(msgspec.Struct, frozen=True):
    """What a reset removed and what it could not."""

    removed: tuple[Path, ...]
    failed: tuple[str, ...]  # sentences naming the path and the reason


def entries_of(data_dir: Path, kind: DataKind) -> list[Path]:
    """The entries of ``kind`` directly in ``data_dir``: the name and its set-aside copies."""
    try:
        names = os.listdir(data_dir)
    except OSError:
        return []
    matching = [
        name
        for name in names
        if name == kind.name or name.startswith((f"{kind.name}.", f"{kind.name}-"))
    ]
    return [data_dir / name for name in sorted(matching)]


def log_files(folder: Path) -> list[Path]:
    """The log files (and rotated copies) directly in ``folder``; no sub-folders."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [folder / name for name in sorted(names) if LOG_SUFFIX in name]


def tree_size(path: Path) -> int:
    """Bytes of the regular files under ``path``, links not followed."""
    total = 0
    for file in _files_under(path):
        try:
            total += file.lstat().st_size
        except OSError:
            continue
    return total


def _files_under(path: Path) -> Iterator[Path]:
    try:
        info = path.lstat()
    except OSError:
        return
    if stat.S_ISREG(info.st_mode):
        yield path
    elif stat.S_ISDIR(info.st_mode):
        for root, _dirs, files in os.walk(path, followlinks=False):
            yield from (Path(root) / name for name in files)


def models_size(data_dir: Path) -> int:
    """Bytes of the model stores in ``data_dir``."""
    return sum(tree_size(path) for path in entries_of(data_dir, MODELS))


def delete_app_data(data_dir: Path, log_dir: Path, *, models: bool) -> ResetOutcome:
    """Delete PAIR's own entries of ``data_dir`` and the log files of ``log_dir``; the model
    stores only when ``models``. Each removal is logged; a failure is reported, not raised."""
    kinds = (*DELETED, MODELS) if models else DELETED
    # The log folder stays (this app keeps writing there); its log files go.
    targets = [path for kind in kinds for path in entries_of(data_dir, kind)]
    targets += log_files(log_dir)
    removed: list[Path] = []
    failed: list[str] = []
    for path in targets:
        try:
            _remove(path)
        except OSError as exc:
            log.warning("reset: could not remove %s: %s", path, exc)
            failed.append(f"{path}: {exc.strerror or exc}")
            continue
        log.info("reset: removed %s", path)
        removed.append(path)
    return ResetOutcome(tuple(removed), tuple(failed))


def _remove(path: Path) -> None:
    """Remove ``path``: a link as a link, a folder with its contents (links inside removed,
    not followed); this app's open log is emptied instead, so it goes on logging."""
    info = path.lstat()
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)
    elif path.name == OPEN_LOG and stat.S_ISREG(info.st_mode):
        path.write_bytes(b"")
    else:
        path.unlink()
