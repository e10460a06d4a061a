"""The llama.cpp build per platform and GPU: release archives, source-build flags, the backend
label and how many layers go to the GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.components.engines import accel
from backend.components.engines.accel import (
    ALL_LAYERS,
    DetectedGpu,
    Toolkits,
    choose_archive,
    choose_source_build,
    offload_layers,
)

GIB = 1024**3
RTX = DetectedGpu("nvidia", "GeForce RTX 4090", 24 * GIB)
RADEON = DetectedGpu("amd", "Radeon RX 7900 XTX", 24 * GIB)
ARC = DetectedGpu("intel", "Arc A770", 16 * GIB)
IRIS = DetectedGpu("intel", "Iris Xe Graphics", None)
APPLE = DetectedGpu("apple", "Apple M3 Max", None)
MANIFEST = Path(accel.__file__).parent / "manifests" / "llamacpp.json"


def _filled(asset: str, version: str = "6710") -> str:
    return asset.format(version=version)


def test_windows_with_an_nvidia_gpu_takes_the_cuda_archive_and_its_runtime() -> None:
    choice = choose_archive("windows", "AMD64", [IRIS, RTX])
    assert _filled(choice.asset) == "llama-b6710-bin-win-cuda-12.4-x64.zip"
    assert choice.runtime_asset == "cudart-llama-bin-win-cuda-12.4-x64.zip"
    assert choice.backend == "CUDA 12.4"


@pytest.mark.parametrize("gpu", [RADEON, ARC])
def test_windows_with_another_discrete_gpu_takes_vulkan(gpu: DetectedGpu) -> None:
    choice = choose_archive("windows", "x86_64", [gpu])
    assert (_filled(choice.asset), choice.runtime_asset, choice.backend) == (
        "llama-b6710-bin-win-vulkan-x64.zip",
        None,
        "Vulkan",
    )


@pytest.mark.parametrize("gpus", [[], [IRIS]])
def test_windows_without_a_discrete_gpu_takes_the_cpu_archive(gpus: list[DetectedGpu]) -> None:
    choice = choose_archive("windows", "amd64", gpus)
    assert (_filled(choice.asset), choice.backend) == ("llama-b6710-bin-win-cpu-x64.zip", "CPU")


def test_windows_on_arm_keeps_the_cpu_archive_even_with_an_nvidia_gpu() -> None:
    choice = choose_archive("windows", "ARM64", [RTX])
    assert (_filled(choice.asset), choice.backend) == ("llama-b6710-bin-win-cpu-arm64.zip", "CPU")


@pytest.mark.parametrize("gpu", [RTX, RADEON, ARC])
def test_linux_with_any_discrete_gpu_takes_vulkan(gpu: DetectedGpu) -> None:
    choice = choose_archive("linux", "x86_64", [gpu])
    assert _filled(choice.asset) == "llama-b6710-bin-ubuntu-vulkan-x64.tar.gz"
    assert (choice.runtime_asset, choice.backend) == (None, "Vulkan")


def test_linux_arm_with_a_gpu_takes_the_arm_vulkan_archive() -> None:
    choice = choose_archive("linux", "aarch64", [RADEON])
    assert _filled(choice.asset) == "llama-b6710-bin-ubuntu-vulkan-arm64.tar.gz"


@pytest.mark.parametrize("gpus", [[], [IRIS]])
def test_linux_without_a_discrete_gpu_takes_the_cpu_archive(gpus: list[DetectedGpu]) -> None:
    choice = choose_archive("linux", "x86_64", gpus)
    assert (_filled(choice.asset), choice.backend) == ("llama-b6710-bin-ubuntu-x64.tar.gz", "CPU")


def test_apple_silicon_takes_the_metal_archive() -> None:
    choice = choose_archive("darwin", "arm64", [APPLE])
    assert _filled(choice.asset) == "llama-b6710-bin-macos-arm64.tar.gz"
    assert choice.backend == "Metal"


def test_an_intel_mac_takes_the_cpu_archive() -> None:
    choice = choose_archive("darwin", "x86_64", [RADEON])
    assert (_filled(choice.asset), choice.backend) == ("llama-b6710-bin-macos-x64.tar.gz", "CPU")


@pytest.mark.parametrize(
    ("os_name", "machine", "key"),
    [
        ("linux", "x86_64", "linux/x86_64"),
        ("linux", "aarch64", "linux/aarch64"),
        ("darwin", "arm64", "darwin/arm64"),
        ("darwin", "x86_64", "darwin/x86_64"),
        ("windows", "amd64", "windows/amd64"),
        ("windows", "arm64", "windows/arm64"),
    ],
)
def test_without_a_gpu_the_choice_is_the_manifests_archive(
    os_name: accel.OsName, machine: str, key: str
) -> None:
    assets = json.loads(MANIFEST.read_text())["methods"]["archive"]["assets"]
    gpus = [APPLE] if os_name == "darwin" else []
    assert choose_archive(os_name, machine, gpus).asset == assets[key]


def test_an_unknown_machine_or_system_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown machine type 'riscv64'"):
        choose_archive("linux", "riscv64", [])
    with pytest.raises(ValueError, match="unknown operating system 'plan9'"):
        choose_archive("plan9", "x86_64", [])  # type: ignore[arg-type]


def test_source_build_takes_cuda_when_nvcc_and_an_nvidia_gpu_are_here() -> None:
    build = choose_source_build("linux", "x86_64", [RTX], Toolkits(cuda_version="12.6"))
    assert build.cmake_flags == ("-DGGML_CUDA=ON", "-DGGML_RPC=ON")
    assert build.backend == "CUDA 12.6"
    assert build.cmake_args() == "-DGGML_CUDA=ON -DGGML_RPC=ON"


def test_source_build_prefers_cuda_over_vulkan_when_both_toolkits_are_here() -> None:
    toolkits = Toolkits(cuda_version="12.4", vulkan_sdk=True)
    assert choose_source_build("windows", "amd64", [RTX], toolkits).backend == "CUDA 12.4"


def test_source_build_takes_hip_for_an_amd_gpu_with_rocm() -> None:
    toolkits = Toolkits(rocm=True, vulkan_sdk=True)
    build = choose_source_build("linux", "x86_64", [RADEON], toolkits)
    assert (build.cmake_flags, build.backend) == (("-DGGML_HIP=ON", "-DGGML_RPC=ON"), "ROCm")


def test_source_build_takes_vulkan_when_only_the_sdk_is_here() -> None:
    build = choose_source_build("linux", "x86_64", [ARC], Toolkits(vulkan_sdk=True))
    assert (build.cmake_flags, build.backend) == (("-DGGML_VULKAN=ON", "-DGGML_RPC=ON"), "Vulkan")


def test_source_build_with_a_toolkit_but_no_matching_gpu_stays_cpu() -> None:
    toolkits = Toolkits(cuda_version="12.4", rocm=True)
    assert choose_source_build("linux", "x86_64", [ARC], toolkits).backend == "CPU"
    everything = Toolkits(cuda_version="12.4", vulkan_sdk=True, rocm=True)
    build = choose_source_build("linux", "x86_64", [IRIS], everything)
    assert (build.cmake_flags, build.backend) == (("-DGGML_RPC=ON",), "CPU")


def test_source_build_on_apple_silicon_is_metal_without_any_toolkit() -> None:
    build = choose_source_build("darwin", "arm64", [], Toolkits())
    assert (build.cmake_flags, build.backend) == (("-DGGML_METAL=ON", "-DGGML_RPC=ON"), "Metal")


def test_source_build_on_an_intel_mac_without_toolkits_is_cpu() -> None:
    assert choose_source_build("darwin", "x86_64", [RADEON], Toolkits()).backend == "CPU"


def test_every_source_build_keeps_the_rpc_backend() -> None:
    cases = [
        ("linux", [RTX], Toolkits(cuda_version="12.4")),
        ("linux", [RADEON], Toolkits(rocm=True)),
        ("linux", [ARC], Toolkits(vulkan_sdk=True)),
        ("linux", [], Toolkits()),
    ]
    for os_name, gpus, toolkits in cases:
        build = choose_source_build(os_name, "x86_64", gpus, toolkits)  # type: ignore[arg-type]
        assert build.cmake_flags[-1] == "-DGGML_RPC=ON"


def test_a_model_that_fits_in_vram_with_headroom_offloads_every_layer() -> None:
    assert offload_layers(24 * GIB, 20 * GIB, 48) == ALL_LAYERS


def test_a_model_just_past_the_headroom_offloads_a_proportional_share() -> None:
    # 10 GiB free keeps 1 GiB back: 9 GiB of a 12 GiB, 48-layer model is 36 layers.
    assert offload_layers(10 * GIB, 12 * GIB, 48) == 36


def test_the_proportional_share_rounds_down() -> None:
    assert offload_layers(10 * GIB, 40 * GIB, 80) == 18  # 9/40 of 80 is 18 exactly
    assert offload_layers(10 * GIB + 1, 40 * GIB, 80) == 18


@pytest.mark.parametrize("vram", [None, 0])
def test_without_a_gpu_no_layer_is_offloaded(vram: int | None) -> None:
    assert offload_layers(vram, 4 * GIB, 32) == 0


def test_a_bad_model_size_or_layer_count_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        offload_layers(8 * GIB, 0, 32)
    with pytest.raises(ValueError, match="must be positive"):
        offload_layers(8 * GIB, GIB, 0)
