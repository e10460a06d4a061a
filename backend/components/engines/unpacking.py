"""Unpacking an engine's release archive into PAIR's install dir, the same on every system but
for file modes: Windows has no executable bit, so nothing is chmod-ed there.

A zip keeps its folder tree (Ollama's ``ollama.exe`` with ``lib/ollama/…`` beside it); a tar,
whatever its compression (zstd too: Ollama's Linux ``.tar.zst``, read as a stream by
``zstd_stream``), is unpacked with the ``data`` filter (no absolute paths, no links out of the
folder, no device files).
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tarfile
import zipfile
import zlib
from pathlib import Path

from backend.components.engines.zstd_stream import ZstdError, is_zstd, open_tar_zst
from backend.protocol import errors

_BROKEN = (
    tarfile.TarError,
    zipfile.BadZipFile,
    gzip.BadGzipFile,
    EOFError,
    zlib.error,
    ZstdError,
)


def keeps_file_modes(system_platform: str | None = None) -> bool:
    """Whether unpacking sets the modes an archive records: everywhere but Windows, where
    ``chmod`` can only toggle the read-only flag and a file runs by its extension."""
    return (sys.platform if system_platform is None else system_platform) != "win32"


def unpack(
    archive: Path,
    kind: str,
    install_dir: Path,
    *,
    unwrap: bool = False,
    name: str = "engine",
    keep_modes: bool | None = None,
) -> None:
    """Unpack ``archive`` into a fresh ``install_dir`` and delete it (blocking: in a thread).

    ``kind`` ``tar.zst``: a zstd-compressed tar; ``auto``: a zip, a zstd-compressed tar or
    another tar as the file's content says. ``unwrap``: an archive that holds one folder and
    nothing beside it is unpacked from inside that folder. ``keep_modes`` (``keeps_file_modes()``
    unless given): a zip's recorded Unix modes are set. A broken archive leaves neither
    ``install_dir`` nor the download behind.
    """
    keep_modes = keeps_file_modes() if keep_modes is None else keep_modes
    scratch = install_dir.with_name(f"{install_dir.name}.unpack")
    for leftover in (install_dir, scratch):
        if leftover.exists():
            shutil.rmtree(leftover)
    scratch.mkdir(parents=True)
    try:
        _extract(archive, kind, scratch, keep_modes=keep_modes)
        root = _only_folder(scratch) if unwrap else None
        (root or scratch).rename(install_dir)
    except _BROKEN as exc:
        raise errors.InternalError(
            f"the download of {name} is not an archive PAIR can unpack ({exc}); nothing was "
            "unpacked"
        ) from None
    finally:
        if scratch.exists():
            shutil.rmtree(scratch)
        archive.unlink(missing_ok=True)


def _extract(archive: Path, kind: str, target: Path, *, keep_modes: bool) -> None:
    """Extract ``archive`` of ``kind`` into ``target``; a tar of either compression through the
    one ``_untar``."""
    if kind == "zip" or (kind == "auto" and zipfile.is_zipfile(archive)):
        _unzip(archive, target, keep_modes=keep_modes)
    elif kind == "tar.zst" or (kind == "auto" and is_zstd(archive)):
        with open_tar_zst(archive) as bundle:
            _untar(bundle, target)
    else:
        with tarfile.open(archive) as bundle:
            _untar(bundle, target)


def _untar(bundle: tarfile.TarFile, target: Path) -> None:
    """Extract a tar with the ``data`` filter: a member that would land outside ``target``, an
    absolute or outward link or a device file is refused (``tarfile.FilterError``)."""
    bundle.extractall(target, filter="data")


def _unzip(archive: Path, target: Path, *, keep_modes: bool) -> None:
    """Extract a zip, folders and all, keeping the executable bits Unix zips record
    (``zipfile`` drops them) where ``keep_modes``."""
    with zipfile.ZipFile(archive) as bundle:
        for info in bundle.infolist():
            extracted = Path(bundle.extract(info, target))
            mode = (info.external_attr >> 16) & 0o777
            if keep_modes and info.create_system == 3 and mode and not info.is_dir():
                extracted.chmod((mode & 0o755) | 0o600)


def _only_folder(folder: Path) -> Path | None:
    entries = list(folder.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return None
