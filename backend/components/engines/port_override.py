"""The user override that moves an engine to another port: the smallest change to the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.components.engines.manifest import (
    Manifest,
    ManifestError,
    build,
    bundled_documents,
    deep_merge,
    merge_override,
    read_override,
)


def moved_manifest(
    override_dir: Path, name: str, port: int
) -> tuple[Manifest, dict[str, Any], Path]:
    """The engine's manifest on ``port``, the override that says so and its file (an override
    that cannot be read gives way to one that only moves the port)."""
    path = override_dir / f"{name}.json"
    try:
        override = read_override(path) if path.exists() else {}
    except ManifestError:
        override = {}
    override = deep_merge(override, {"runtime": {"port": port}})
    manifest = build(
        merge_override(bundled_documents().get(name, {}), override, str(path)), str(path)
    )
    return manifest, override, path
