"""Asks Hugging Face's public API (or a stand-in at ``PAIR_HUB_URL``) for GGUF repositories
and their files. Each question opens and closes its own HTTP session: questions are rare (a
person searching), and nothing is left to close when the broker stops."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar
from urllib.parse import quote

import aiohttp

from backend.components.hub.answers import AnswerError, parse_search, parse_tree
from backend.protocol import errors
from backend.protocol.types.hub import HubFile, HubModel

HUB_URL_ENV = "PAIR_HUB_URL"
DEFAULT_HUB_URL = "https://huggingface.co"
TIMEOUT_S = 20.0
T = TypeVar("T")
_MAX_ANSWER = 16 * 1024 * 1024  # a file list of thousands of entries is well below this


def hub_url(environ: Mapping[str, str]) -> str:
    """Where Hugging Face's API is: ``PAIR_HUB_URL`` when set (tests, the demo), else the real
    one, without a trailing slash."""
    return (environ.get(HUB_URL_ENV) or DEFAULT_HUB_URL).rstrip("/")


class HubClient:
    """Questions to Hugging Face's API at ``base_url``; owns no session between questions."""

    def __init__(self, base_url: str, *, timeout_s: float = TIMEOUT_S) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def search(self, query: str, limit: int) -> list[HubModel]:
        """Repositories with GGUF files whose name holds ``query``, most downloaded first."""
        params = {
            "search": query,
            "filter": "gguf",
            "sort": "downloads",
            "direction": "-1",
            "limit": str(limit),
        }
        body = await self._get("/api/models", params, f"the search for {query!r}")
        return _parsed(lambda: parse_search(body))

    async def files(self, repo: str) -> list[HubFile]:
        """The GGUF models of ``repo`` (``owner/name``), smallest first."""
        path = f"/api/models/{quote(repo)}/tree/main"
        body = await self._get(path, {"recursive": "true"}, f"the files of {repo}", repo)
        return _parsed(lambda: parse_tree(body, repo, self.base_url))

    async def _get(
        self, path: str, params: Mapping[str, str], what: str, repo: str | None = None
    ) -> bytes:
        url = self.base_url + path
        try:
            async with (
                aiohttp.ClientSession(timeout=self._timeout) as session,
                session.get(url, params=params) as response,
            ):
                if response.status != 200:
                    raise _refusal(response.status, what, repo)
                return await _read_bounded(response)
        except TimeoutError:
            raise errors.Unavailable(
                f"Hugging Face did not answer: no answer to {what} within {self._timeout.total:g} s"
            ) from None
        except aiohttp.ClientError as exc:
            reason = network_reason(exc)
            raise errors.Unavailable(f"Hugging Face did not answer: {reason}") from None


def network_reason(exc: aiohttp.ClientError) -> str:
    """What went wrong on the network, in words (no class names, no ``ssl:default``)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        reason = exc.os_error.strerror or str(exc.os_error) or "refused"
        return f"cannot connect to {exc.host}:{exc.port} ({reason})"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return "the connection closed before the answer was complete"
    return str(exc) or "the connection failed"


def _refusal(status: int, what: str, repo: str | None) -> errors.RpcError:
    # Hugging Face answers 401 for a repository that does not exist as for a private one.
    if repo is not None and status in (401, 404):
        return errors.NotFound(f"Hugging Face has no public repository {repo}", {"repo": repo})
    if status == 429:
        return errors.Unavailable("Hugging Face asks to wait: too many requests; try again soon")
    return errors.Unavailable(f"Hugging Face did not answer {what}: HTTP {status}")


async def _read_bounded(response: aiohttp.ClientResponse) -> bytes:
    body = bytearray()
    async for chunk in response.content.iter_any():
        body += chunk
        if len(body) > _MAX_ANSWER:
            raise errors.Unavailable("Hugging Face's answer is larger than PAIR reads")
    return bytes(body)


def _parsed(parse: Callable[[], T]) -> T:
    try:
        return parse()
    except AnswerError as exc:
        raise errors.Unavailable(f"Hugging Face's answer cannot be read: {exc}") from None
