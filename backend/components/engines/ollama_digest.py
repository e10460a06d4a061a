"""Ollama's weights digest of each model: the blob its Modelfile is built ``FROM``.

``/api/tags`` gives each model's manifest digest, which changes with any layer (a new template
or parameters) and differs between two names of the same weights; the identity PAIR wants is
the model layer's, the GGUF blob ``/api/show`` names in its ``modelfile``:
``FROM /home/u/.ollama/models/blobs/sha256-<hex>``. That blob is the GGUF file itself, so its
digest equals the SHA-256 of the same file in llama.cpp's store. ``/api/show`` is asked once per
model version (name + manifest digest) and the answer kept.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Final

from backend.components.engines.http import EngineEndpoint, request_json
from backend.protocol import errors

log = logging.getLogger(__name__)

SHOW_TIMEOUT_S: Final = 10.0
# The blob's file name: ``sha256-<hex>`` (``sha256:<hex>`` in Ollama before 0.1.30), at the end
# of the path the FROM line names (a Windows path has backslashes).
_FROM_BLOB: Final = re.compile(
    r"^\s*FROM\s+\"?(?:.*[/\\])?sha256[-:](?P<hex>[0-9a-fA-F]{64})\"?\s*$",
    re.IGNORECASE | re.MULTILINE,
)


def weights_digest(modelfile: str) -> str | None:
    """``sha256:<hex>`` of the first blob a Modelfile is built FROM; None when it is built from
    a model name or a path that is not a blob (a Modelfile as the user wrote it)."""
    match = _FROM_BLOB.search(modelfile)
    return f"sha256:{match['hex'].lower()}" if match is not None else None


def manifest_digests(document: Any) -> dict[str, str]:
    """Model name -> manifest digest from an ``/api/tags`` answer (entries without either are
    left out)."""
    models = document.get("models") if isinstance(document, dict) else None
    found: dict[str, str] = {}
    for item in models if isinstance(models, list) else []:
        if not isinstance(item, dict):
            continue
        name, digest = item.get("name"), item.get("digest")
        if isinstance(name, str) and isinstance(digest, str):
            found[name] = digest
    return found


class OllamaDigests:
    """The weights digest of each model one Ollama lists, asked once per model version (no
    tasks: ``refresh`` runs in the caller's)."""

    def __init__(self) -> None:
        # (name, manifest digest) -> the weights digest; None: its Modelfile names no blob.
        self._shown: dict[tuple[str, str], str | None] = {}

    async def refresh(self, endpoint: EngineEndpoint) -> dict[str, str]:
        """Model -> weights digest of every model Ollama lists now; a model whose show fails
        is left out and asked again at the next refresh."""
        document = await request_json(endpoint, "GET", "/api/tags", None, timeout=SHOW_TIMEOUT_S)
        versions = manifest_digests(document)
        for version in versions.items():
            if version not in self._shown:
                try:
                    self._shown[version] = await _show_digest(endpoint, version[0])
                except errors.RpcError as exc:
                    log.debug("no weights digest for %s yet: %s", version[0], exc)
        self._forget_except(versions)
        return {
            name: digest
            for name, manifest in versions.items()
            if (digest := self._shown.get((name, manifest))) is not None
        }

    def _forget_except(self, versions: Mapping[str, str]) -> None:
        """Drop the answers for versions Ollama no longer lists (deleted, or pulled anew)."""
        for version in [v for v in self._shown if versions.get(v[0]) != v[1]]:
            del self._shown[version]


async def _show_digest(endpoint: EngineEndpoint, name: str) -> str | None:
    shown = await request_json(
        endpoint, "POST", "/api/show", {"model": name}, timeout=SHOW_TIMEOUT_S
    )
    modelfile = shown.get("modelfile") if isinstance(shown, dict) else None
    return weights_digest(modelfile) if isinstance(modelfile, str) else None
