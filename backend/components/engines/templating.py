"""Placeholders in manifests (``{host}``, ``{port}``, ``{model}``, ...) and path expansion."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from backend.components.engines.manifest import ManifestError

_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_WINDOWS_VAR = re.compile(r"%([A-Za-z_][A-Za-z0-9_]*)%")


def expand(template: str, values: Mapping[str, str]) -> str:
    """Replace every ``{name}``; an unknown name is a manifest error, never left in place."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ManifestError(f"unknown placeholder {{{name}}} in {template!r}")
        return values[name]

    return _PLACEHOLDER.sub(replace, template)


def expand_all(items: list[str], values: Mapping[str, str]) -> list[str]:
    """``expand`` over an argv."""
    return [expand(item, values) for item in items]


def expand_json(value: Any, values: Mapping[str, str]) -> Any:
    """``expand`` inside every string of a JSON value (action bodies)."""
    if isinstance(value, str):
        return expand(value, values)
    if isinstance(value, list):
        return [expand_json(item, values) for item in value]
    if isinstance(value, dict):
        return {key: expand_json(item, values) for key, item in value.items()}
    return value


def expand_path(path: str) -> str:
    """``~``, ``$VAR`` and ``%VAR%`` expanded (an unset variable leaves the path unusable)."""
    path = _WINDOWS_VAR.sub(lambda m: os.environ.get(m.group(1), f"%{m.group(1)}%"), path)
    return os.path.expanduser(os.path.expandvars(path))
