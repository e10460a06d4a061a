"""Which llama.cpp build uses this computer's accelerator, and how many layers it offloads.

Plain functions of what was detected (platform, GPUs, toolkits): no I/O. The archive choice
names a release asset of ``ggml-org/llama.cpp`` (``{version}`` is the build number, as in the
engine manifest); the pip choice names the CMake flags a source build is configured with. Both
always keep the RPC backend, so every member can serve or use a spread model.
"""

from __future__ import annotations

# Standard library only: scripts/bootstrap.py loads this file with the Python it runs on, before
# any package is installed.
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

OsName = Literal["linux", "darwin", "windows"]
GpuVendor = Literal["nvidia", "amd", "intel", "apple"]
Backend = str  # what ``pair engines`` shows: "CPU", "CUDA 12.4", "Vulkan", "Metal", "ROCm"

# The CUDA toolkit of the Windows release archives PAIR takes: 12.4 runs on older drivers than
# the 13.x builds, and its runtime DLLs come in a separate ``cudart-llama-*`` archive.
WINDOWS_CUDA = "12.4"
# llama.cpp clamps -ngl to the model's layers; a large value means "every layer and the output".
ALL_LAYERS = 999
OFFLOAD_HEADROOM_PERCENT = 10  # of free VRAM, kept for the KV cache and compute buffers
RPC_FLAG = "-DGGML_RPC=ON"

_ARCHES = {"x86_64": "x64", "amd64": "x64", "x64": "x64", "arm64": "arm64", "aarch64": "arm64"}


@dataclass(frozen=True, slots=True)
class DetectedGpu:
    """One GPU as detection reports it; ``vram_bytes`` is None for unified or unknown memory."""

    vendor: GpuVendor
    name: str = ""
    vram_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Toolkits:
    """The GPU toolkits a source build can use: nvcc's CUDA version, the Vulkan SDK, ROCm."""

    cuda_version: str | None = None  # None when nvcc is not found
    vulkan_sdk: bool = False  # glslc and the Vulkan headers both found
    rocm: bool = False  # hipcc (ROCm's HIP compiler) found


@dataclass(frozen=True, slots=True)
class ArchiveChoice:
    """A release archive to install: its asset pattern, a runtime archive beside it, a label."""

    asset: str
    runtime_asset: str | None
    backend: Backend


@dataclass(frozen=True, slots=True)
class SourceBuild:
    """A pip (source) build: the CMake flags to configure it with and its label."""

    cmake_flags: tuple[str, ...]
    backend: Backend

    def cmake_args(self) -> str:
        """The flags as one ``CMAKE_ARGS`` environment value."""
        return " ".join(self.cmake_flags)


def release_arch(machine: str) -> str:
    """The architecture word of llama.cpp's asset names (``x64``, ``arm64``) for ``machine``."""
    arch = _ARCHES.get(machine.lower())
    if arch is None:
        known = ", ".join(sorted(_ARCHES))
        raise ValueError(f"unknown machine type {machine!r} (known: {known})")
    return arch


def is_discrete(gpu: DetectedGpu) -> bool:
    """Whether ``gpu`` has its own memory: NVIDIA and AMD cards, Intel ones reporting VRAM."""
    if gpu.vendor in ("nvidia", "amd"):
        return True
    return gpu.vendor == "intel" and bool(gpu.vram_bytes)


def choose_archive(os_name: OsName, machine: str, gpus: Sequence[DetectedGpu]) -> ArchiveChoice:
    """The release asset for this computer: CUDA, Vulkan or Metal where it has the GPU, else CPU."""
    arch = release_arch(machine)
    if os_name == "darwin":
        # The Apple-silicon archive is the Metal build; Intel Macs get the CPU one.
        return ArchiveChoice(_asset(f"macos-{arch}", "tar.gz"), None, _metal_or_cpu(arch))
    discrete = [gpu for gpu in gpus if is_discrete(gpu)]
    if os_name == "windows":
        return _windows_archive(arch, discrete)
    if os_name == "linux":
        if discrete:
            return ArchiveChoice(_asset(f"ubuntu-vulkan-{arch}", "tar.gz"), None, "Vulkan")
        return ArchiveChoice(_asset(f"ubuntu-{arch}", "tar.gz"), None, "CPU")
    raise ValueError(f"unknown operating system {os_name!r} (known: linux, darwin, windows)")


def _windows_archive(arch: str, discrete: Sequence[DetectedGpu]) -> ArchiveChoice:
    if arch == "x64" and any(gpu.vendor == "nvidia" for gpu in discrete):
        runtime = f"cudart-llama-bin-win-cuda-{WINDOWS_CUDA}-x64.zip"
        return ArchiveChoice(_asset(f"win-cuda-{WINDOWS_CUDA}-x64", "zip"), runtime, _cuda())
    if arch == "x64" and discrete:
        # AMD and Intel cards on Windows: the Vulkan build is the one that runs on all of them.
        return ArchiveChoice(_asset("win-vulkan-x64", "zip"), None, "Vulkan")
    return ArchiveChoice(_asset(f"win-cpu-{arch}", "zip"), None, "CPU")


def choose_source_build(
    os_name: OsName, machine: str, gpus: Sequence[DetectedGpu], toolkits: Toolkits
) -> SourceBuild:
    """The CMake flags of a pip build: the GPU backend whose toolkit and GPU are both here."""
    arch = release_arch(machine)
    vendors = {gpu.vendor for gpu in gpus if is_discrete(gpu)}
    if os_name == "darwin" and arch == "arm64":
        return SourceBuild(("-DGGML_METAL=ON", RPC_FLAG), "Metal")
    if toolkits.cuda_version is not None and "nvidia" in vendors:
        return SourceBuild(("-DGGML_CUDA=ON", RPC_FLAG), _cuda(toolkits.cuda_version))
    if toolkits.rocm and "amd" in vendors:
        return SourceBuild(("-DGGML_HIP=ON", RPC_FLAG), "ROCm")
    if toolkits.vulkan_sdk and vendors:
        return SourceBuild(("-DGGML_VULKAN=ON", RPC_FLAG), "Vulkan")
    return SourceBuild((RPC_FLAG,), "CPU")


def offload_layers(vram_free_bytes: int | None, model_bytes: int, layer_count: int) -> int:
    """The ``-ngl`` value: every layer when the model fits in free VRAM with headroom, else a
    proportional share of the layers, and 0 without a GPU."""
    if model_bytes <= 0 or layer_count <= 0:
        raise ValueError("the model's size and layer count must be positive")
    if not vram_free_bytes or vram_free_bytes < 0:
        return 0
    usable = vram_free_bytes - vram_free_bytes * OFFLOAD_HEADROOM_PERCENT // 100
    if usable >= model_bytes:
        return ALL_LAYERS
    return usable * layer_count // model_bytes


def _asset(flavour: str, extension: str) -> str:
    return f"llama-b{{version}}-bin-{flavour}.{extension}"


def _metal_or_cpu(arch: str) -> Backend:
    return "Metal" if arch == "arm64" else "CPU"


def _cuda(version: str = WINDOWS_CUDA) -> Backend:
    return f"CUDA {version}"
