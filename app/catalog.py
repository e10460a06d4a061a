"""The model hub's catalogue: a curated list of models shipped with the app, checked on load.

The file lives inside the ``app`` package (``app/resources/model_catalog.json``) and is read
through ``importlib.resources``, so the same lookup works from a checkout, an installed wheel
and a frozen build. A file that does not validate leaves the hub empty with a message saying
why; nothing else depends on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import unquote, urlsplit

import msgspec

CATALOG_FILE = "model_catalog.json"
# The engines an entry can name: Ollama and LM Studio pull by name, llama.cpp a model file
# by its https address (a ``.gguf`` on Hugging Face).
PullEngine = Literal["ollama", "lmstudio", "llamacpp"]
_GGUF = ".gguf"
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
_UNITS = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))


class CatalogEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One curated model: what it is, its rough download size, and its name on each engine."""

    id: Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=80)]
    name: Text
    publisher: Text
    description: Annotated[str, msgspec.Meta(min_length=1, max_length=300)]
    tags: tuple[Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9-]+$")], ...] = ()
    size_bytes: Annotated[int, msgspec.Meta(gt=0)]
    engines: Annotated[dict[PullEngine, Text], msgspec.Meta(min_length=1)]


class CatalogFile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The file's shape: a format version and the entries."""

    version: Literal[1]
    models: list[CatalogEntry]


class CatalogError(ValueError):
    """The catalogue file is missing or does not match its schema."""


class Catalog(msgspec.Struct, frozen=True):
    """The entries that loaded, or none and ``error`` saying why the file was refused."""

    entries: tuple[CatalogEntry, ...] = ()
    error: str | None = None


def parse_catalog(data: bytes) -> tuple[CatalogEntry, ...]:
    """Validate the file's bytes; raises ``CatalogError`` naming the first problem."""
    try:
        document = msgspec.json.decode(data, type=CatalogFile)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise CatalogError(str(exc)) from None
    seen: set[str] = set()
    for entry in document.models:
        if entry.id in seen:
            raise CatalogError(f"the id {entry.id!r} appears twice")
        seen.add(entry.id)
        model_file = entry.engines.get("llamacpp")
        if model_file is not None and not _is_model_file_url(model_file):
            raise CatalogError(f"{entry.id}: llamacpp must be the https address of a .gguf file")
    return tuple(document.models)


def _is_model_file_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme == "https" and bool(parts.netloc) and parts.path.lower().endswith(_GGUF)


def url_model_name(url: str) -> str:
    """The name a model file's address is saved under: its last path segment without
    ``.gguf`` (the broker checks it; the address itself when it names no file)."""
    segment = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    if segment.lower().endswith(_GGUF):
        segment = segment[: -len(_GGUF)]
    return segment or url


def pulled_name(name: str) -> str:
    """The name a model is listed under once pulled: a model file's address gives its file's
    name, any other name stays as it is."""
    return url_model_name(name) if name.startswith(("http://", "https://")) else name


def load_catalog(path: Path | None = None) -> Catalog:
    """Read the shipped catalogue (or ``path``); a broken file gives an empty one and a reason."""
    where = str(path) if path is not None else CATALOG_FILE
    try:
        if path is None:
            data = (resources.files("app") / "resources" / CATALOG_FILE).read_bytes()
        else:
            data = path.read_bytes()
        return Catalog(parse_catalog(data))
    except (OSError, CatalogError) as exc:
        return Catalog(error=f"The model catalogue ({where}) could not be read: {exc}")


def matches(entry: CatalogEntry, query: str) -> bool:
    """True when every word of ``query`` occurs in the entry's text, tags or engine names."""
    words = (entry.name, entry.publisher, entry.description, *entry.tags, *entry.engines.values())
    haystack = " ".join(words).casefold()
    return all(word in haystack for word in query.casefold().split())


def search(entries: Iterable[CatalogEntry], query: str) -> list[CatalogEntry]:
    """The entries that match ``query`` (all of them for an empty query), in catalogue order."""
    return [entry for entry in entries if matches(entry, query)]


def format_size(size_bytes: int | None) -> str:
    """A short decimal size (``2.0 GB``, ``523 MB``), as the engines' own tools print them."""
    if size_bytes is None or size_bytes < 0:
        return "—"
    for unit, factor in _UNITS:
        if size_bytes >= factor:
            value = size_bytes / factor
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{size_bytes} B"
