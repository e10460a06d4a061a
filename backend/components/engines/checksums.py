"""Checksums an engine's publisher lists for its release files: a ``sha256sum`` list (Ollama's
``sha256sum.txt``), a listing of one bare hash, or a GitHub release whose assets carry
``digest: sha256:…`` (llama.cpp)."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp

from backend.components.engines.versions import VersionUnknown, fetch_text
from backend.protocol import errors

LISTING_TIMEOUT_S = 30.0
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


async def listed_sha256(
    listing_url: str,
    url: str,
    *,
    session: aiohttp.ClientSession,
    name: str,
    nothing_done: str,
) -> str:
    """The checksum the document at ``listing_url`` gives the file ``url`` downloads (see
    ``checksum_for``); a listing that cannot be read or lists none is an actionable error."""
    try:
        listing = await fetch_text(session, listing_url, timeout=LISTING_TIMEOUT_S)
    except VersionUnknown as exc:
        raise errors.Unavailable(
            f"cannot get the checksums of {name} ({exc}); check the internet connection; "
            f"{nothing_done}"
        ) from None
    file_name = unquote(urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1])
    found = checksum_for(listing, file_name)
    if found is None:
        raise errors.InternalError(
            f"{listing_url} lists no SHA-256 checksum for {file_name}; {nothing_done}"
        )
    return found


def checksum_for(listing: str, file_name: str) -> str | None:
    """The SHA-256 a listing gives ``file_name``: a ``sha256sum``-style list, a listing of one
    bare hash, or a GitHub release (JSON) whose asset of that name has ``digest: sha256:…``."""
    if listing.lstrip().startswith("{"):
        return _release_digest(listing, file_name)
    lines = [line.split() for line in listing.splitlines() if line.strip()]
    if len(lines) == 1 and len(lines[0]) == 1 and _SHA256.fullmatch(lines[0][0]):
        return lines[0][0].lower()
    for parts in lines:
        if len(parts) >= 2 and _SHA256.fullmatch(parts[0]):
            listed = parts[-1].lstrip("*")
            listed = listed.removeprefix("./")
            if listed == file_name:
                return parts[0].lower()
    return None


def _release_digest(text: str, file_name: str) -> str | None:
    try:
        document: Any = json.loads(text)
    except ValueError:
        return None
    assets = document.get("assets") if isinstance(document, dict) else None
    for asset in assets if isinstance(assets, list) else []:
        if not isinstance(asset, dict) or asset.get("name") != file_name:
            continue
        digest = asset.get("digest")  # null for assets uploaded before GitHub computed them
        if isinstance(digest, str) and digest[:7].lower() == "sha256:":
            value = digest[7:]
            return value.lower() if _SHA256.fullmatch(value) else None
    return None
