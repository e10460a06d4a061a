"""Which version of an engine is installed, which is the latest, and whether that is newer.

The installed version comes from the manifest's ``version`` sources, the latest from its
``latest`` URL. The latest answer is cached for a while, so a client may ask as often as it
likes; a failure is cached for less and comes back as a reason, never as an exception.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from backend.components.engines.commands import run_command
from backend.components.engines.manifest import LatestSpec, VersionSpec
from backend.components.engines.templating import expand, expand_all
from backend.core.clock import Clock
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineVersions

log = logging.getLogger(__name__)

LATEST_KEPT_S = 600.0
FAILURE_KEPT_S = 60.0
_RELEASE = re.compile(r"(\d+(?:\.\d+)*)(.*)", re.DOTALL)


class VersionUnknown(Exception):
    """The version could not be learnt; the message says why, for a person."""


class Latest(msgspec.Struct, frozen=True):
    """The newest release (``version``), or why it is not known (``problem``)."""

    version: str | None
    problem: str | None = None


def extract(pattern: str, text: str) -> str | None:
    """The first group of the first match of ``pattern`` in ``text``, stripped (or None)."""
    match = re.search(pattern, text)
    if match is None or match.group(1) is None:
        return None
    return match.group(1).strip() or None


def pick_member(document: Any, dotted: str) -> Any:
    """``document["a"]["b"]`` for ``a.b``; None when a step is missing or not an object."""
    for key in dotted.split("."):
        if not isinstance(document, dict):
            return None
        document = document.get(key)
    return document


def is_newer(candidate: str, current: str) -> bool:
    """Whether release ``candidate`` comes after ``current`` (``0.6.0`` > ``0.5.12`` >
    ``0.5.12-rc1``); versions that are not dotted numbers are newer when they differ."""
    left, right = _release_key(candidate), _release_key(current)
    if left is None or right is None:
        return candidate.strip() != current.strip()
    return left > right


def _release_key(text: str) -> tuple[tuple[int, ...], bool, str] | None:
    match = _RELEASE.fullmatch(text.strip())
    if match is None:
        return None
    numbers = [int(part) for part in match.group(1).split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()  # 1.0.0 is 1.0 is 1
    suffix = match.group(2).lstrip("-.+_~")
    # A plain release sorts after its pre-releases (``-rc2``).
    return tuple(numbers), suffix == "", suffix


def summary(
    engine: EngineName,
    name: str,
    *,
    installed: str | None,
    latest: Latest,
    refusal: str | None,
    found: bool,
    label: str | None = None,
) -> EngineVersions:
    """The ``engine:versions`` answer; ``found``: the executable was found; ``label``: the
    version as the executable names itself, shown in place of ``installed`` (still the one
    compared with the latest)."""
    reasons = [refusal] if refusal is not None else []
    if latest.problem is not None:
        reasons.append(f"the latest version of {name} is not known: {latest.problem}")
    if installed is None and found:
        reasons.append(f"PAIR cannot tell which version of {name} is installed")
    newer = installed is not None and latest.version is not None
    return EngineVersions(
        engine=engine,
        installed=label or installed,
        latest=latest.version,
        update_available=newer and is_newer(str(latest.version), str(installed)),
        can_update=refusal is None,
        reason="; ".join(reasons) or None,
    )


async def installed_version(
    spec: VersionSpec | None,
    *,
    binary: Path | None,
    serving_url: str | None,
    session: aiohttp.ClientSession,
    values: Mapping[str, str],
) -> str | None:
    """The installed version, or None when no source tells it.

    ``serving_url`` is the engine's address while the process PAIR started from ``binary``
    runs (what answers there is that executable), else None.
    """
    if spec is None or binary is None:
        return None
    if spec.http is not None and serving_url is not None:
        found = await _version_over_http(spec, serving_url + spec.http, session)
        if found is not None:
            return found
    if spec.cmd is not None:
        found = await _version_from_command(spec, spec.cmd, spec.pattern, values)
        if found is not None:
            return found
    if spec.python_package is not None:
        return await asyncio.to_thread(_distribution_version, spec.python_package, binary)
    return None


async def _version_over_http(
    spec: VersionSpec, url: str, session: aiohttp.ClientSession
) -> str | None:
    try:
        document = await fetch_json(session, url, timeout=spec.timeout_s)
    except VersionUnknown as exc:
        log.debug("version over HTTP unavailable: %s", exc)
        return None
    value = pick_member(document, spec.member)
    return (value.strip() or None) if isinstance(value, str) else None


async def version_label(
    spec: VersionSpec | None, *, binary: Path | None, values: Mapping[str, str]
) -> str | None:
    """The version as the executable names itself (``label_cmd``), None without one."""
    if spec is None or binary is None or spec.label_cmd is None:
        return None
    return await _version_from_command(spec, spec.label_cmd, spec.label_pattern, values)


async def _version_from_command(
    spec: VersionSpec, cmd: list[str], pattern: str, values: Mapping[str, str]
) -> str | None:
    argv = expand_all(cmd, values)
    env = {key: expand(value, values) for key, value in spec.env.items()}
    try:
        result = await run_command(argv, timeout=spec.timeout_s, env=env)
    except TimeoutError:
        log.debug("%s did not answer within %g s", " ".join(argv), spec.timeout_s)
        return None
    if result.code != 0:
        log.debug("%s failed: %s", " ".join(argv), result.describe())
        return None
    return extract(pattern, "\n".join(result.lines))


def _distribution_version(package: str, binary: Path) -> str | None:
    """The distribution's version if ``binary`` is one of its files (blocking)."""
    importlib.invalidate_caches()  # a pip run in this broker's lifetime changed it
    try:
        distribution = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return None
    root = Path(str(distribution.locate_file(""))).resolve()
    if not binary.resolve().is_relative_to(root):
        return None  # the executable found is another copy, not this package's
    return distribution.version


async def latest_version(spec: LatestSpec, session: aiohttp.ClientSession) -> str:
    """The newest release the manifest's ``latest`` URL announces, or ``VersionUnknown``."""
    document = await fetch_json(session, spec.url, timeout=spec.timeout_s, headers=spec.headers)
    value = pick_member(document, spec.member)
    if not isinstance(value, str):
        raise VersionUnknown(f"{spec.url} answered without a {spec.member!r} text")
    version = extract(spec.pattern, value)
    if version is None:
        raise VersionUnknown(f"{spec.url} answered {value!r}, which is not a version")
    return version


async def fetch_text(
    session: aiohttp.ClientSession,
    url: str,
    *,
    timeout: float,
    headers: Mapping[str, str] | None = None,
) -> str:
    """GET ``url`` within ``timeout`` seconds: its body, or ``VersionUnknown`` saying why."""
    try:
        async with asyncio.timeout(timeout):
            async with session.get(url, headers=dict(headers or {})) as response:
                if response.status != 200:
                    raise VersionUnknown(f"{url} answered HTTP {response.status}")
                return await response.text()
    except TimeoutError:
        raise VersionUnknown(f"{url} did not answer within {timeout:g} s") from None
    except (aiohttp.ClientError, UnicodeDecodeError) as exc:
        raise VersionUnknown(f"cannot reach {url} ({exc or type(exc).__name__})") from None


async def fetch_json(
    session: aiohttp.ClientSession,
    url: str,
    *,
    timeout: float,
    headers: Mapping[str, str] | None = None,
) -> Any:
    """GET a JSON document, or ``VersionUnknown`` saying why not."""
    text = await fetch_text(session, url, timeout=timeout, headers=headers)
    try:
        return json.loads(text)
    except ValueError:
        raise VersionUnknown(f"{url} did not answer JSON") from None


class LatestCache:
    """The last answer about the latest version, kept ``LATEST_KEPT_S`` (a failure
    ``FAILURE_KEPT_S``); concurrent askers share one request."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = asyncio.Lock()
        self._answer: Latest | None = None
        self._expires = 0.0

    async def get(self, fetch: Callable[[], Awaitable[str]], *, fresh: bool = False) -> Latest:
        """The cached answer while it lasts (unless ``fresh``), else ``fetch()``'s."""
        async with self._lock:
            if not fresh and self._answer is not None and self._clock.monotonic() < self._expires:
                return self._answer
            try:
                answer = Latest(await fetch())
            except VersionUnknown as exc:
                answer = Latest(None, str(exc))
            kept = LATEST_KEPT_S if answer.version is not None else FAILURE_KEPT_S
            self._answer, self._expires = answer, self._clock.monotonic() + kept
            return answer
