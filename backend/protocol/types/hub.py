"""Finding GGUF models on Hugging Face (``hub:*``): repositories by name, a repository's files
with the one suggested for a computer's memory."""

from __future__ import annotations

from backend.protocol.types.base import Wire

# Bounds of a search: Hugging Face answers at most 1000 per page, a screen shows far fewer.
HUB_QUERY_MAX_CHARS = 200
HUB_LIMIT_MAX = 100


class HubQuery(Wire, frozen=True, kw_only=True):
    """Parameters of ``hub:search``: words in a repository's name (1-200 characters), and how
    many repositories to answer (1-100), the most downloaded first."""

    query: str
    limit: int = 20


class HubModel(Wire, frozen=True, kw_only=True):
    """A Hugging Face repository holding GGUF files."""

    repo: str  # owner/name
    downloads: int = 0  # in the last 30 days, as Hugging Face counts them
    likes: int = 0
    updated: str | None = None  # ISO 8601 time of the last commit
    pipeline: str | None = None  # e.g. text-generation


class HubModels(Wire, frozen=True, kw_only=True):
    """Answer to ``hub:search``: the repositories found, the most downloaded first."""

    models: list[HubModel]


class HubRepoQuery(Wire, frozen=True, kw_only=True):
    """Parameters of ``hub:files``: a repository (``owner/name``) and, to get a suggestion, the
    memory the model should fit in (bytes)."""

    repo: str
    memory_bytes: int | None = None


class HubFile(Wire, frozen=True, kw_only=True):
    """One GGUF model of a repository: a single file, or a model split in ``parts`` files
    (``-00001-of-00003.gguf``) named by its first part, with the total size of its parts."""

    name: str  # path in the repository
    size: int  # bytes, all parts together
    quant: str | None = None  # Q4_K_M, Q8_0, IQ2_XS, F16... when the name says
    url: str  # where the (first) file downloads from
    parts: int = 1


class HubFiles(Wire, frozen=True, kw_only=True):
    """Answer to ``hub:files``: the repository's GGUF models, smallest first, and the one
    suggested for the given memory with the reason in a sentence (``suggested`` is None when
    no memory was given or nothing fits; ``reason`` then says so)."""

    repo: str
    files: list[HubFile]
    suggested: str | None = None  # a ``HubFile.name``
    reason: str = ""
