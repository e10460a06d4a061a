"""Which llama.cpp release archive PAIR installs here: the build for this computer's GPU.

llama.cpp publishes one archive per platform and accelerator; the engine manifest names the CPU
one. ``accel.choose_archive`` picks from the GPUs node-info reads (NVML, amdgpu's sysfs files):
CUDA on Windows (with the CUDA runtime in a second archive), Vulkan on Linux with a discrete GPU,
Metal on Apple silicon, else the manifest's own archive.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from backend.components.engines.accel import (
    ArchiveChoice,
    DetectedGpu,
    GpuVendor,
    OsName,
    choose_archive,
)
from backend.components.engines.manifest import Manifest, platform_keys, release_asset
from backend.components.nodeinfo.gpus import NvidiaReader, read_amd_gpus

LLAMA_CPP_ENGINE = "llamacpp"


def takes_accelerated_archive(manifest: Manifest) -> bool:
    """Whether ``manifest`` installs llama.cpp's release archive named by its ``assets``."""
    url = manifest.install.url if manifest.install is not None else None
    return (
        manifest.engine == LLAMA_CPP_ENGINE and bool(manifest.assets) and "{asset}" in (url or "")
    )


def accelerated_archive(
    manifest: Manifest, gpus: Sequence[DetectedGpu], keys: tuple[str, str] | None = None
) -> ArchiveChoice | None:
    """The archive to install for ``gpus`` on this platform (``keys`` as ``platform_keys``):
    an accelerated build, else the manifest's own CPU archive labelled CPU; None when the
    manifest has no archive for this platform."""
    keys = keys or platform_keys()
    cpu_asset = release_asset(manifest.assets, keys)
    if cpu_asset is None:
        return None
    system, specific = keys
    try:
        choice = choose_archive(cast(OsName, system), specific.partition("/")[2], gpus)
    except ValueError:  # a machine llama.cpp publishes no accelerated build for
        return ArchiveChoice(cpu_asset, None, "CPU")
    return choice if choice.backend != "CPU" else ArchiveChoice(cpu_asset, None, "CPU")


def detected_gpus(root: Path | None = None) -> list[DetectedGpu]:
    """This computer's GPUs as node-info reads them (blocking: call it in a thread)."""
    reader = NvidiaReader()
    try:
        readings = reader.read() if reader.start() else []
    finally:
        reader.close()
    readings += read_amd_gpus() if root is None else read_amd_gpus(root)
    return [
        DetectedGpu(cast(GpuVendor, gpu.vendor), gpu.name or "", gpu.vram_total_bytes)
        for gpu in readings
    ]


def merge_folder(source: Path, target: Path) -> None:
    """Move everything in ``source`` into ``target`` (replacing what has the same name), then
    remove ``source`` (blocking: call it in a thread)."""
    for entry in source.iterdir():
        destination = target / entry.name
        if destination.is_dir() and not destination.is_symlink():
            shutil.rmtree(destination)
        elif destination.exists() or destination.is_symlink():
            destination.unlink()
        entry.rename(destination)
    source.rmdir()
