"""Installing and uninstalling engines as their manifests describe, with honest progress.

Downloads report measured percentages when the server sends a length; unpacking and running an
installer are stages without a percentage. A pinned checksum must match or nothing is installed.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import aiohttp

from backend.components.engines.commands import run_command
from backend.components.engines.manifest import Manifest
from backend.components.engines.process import EngineLog
from backend.components.engines.templating import expand_all
from backend.protocol import errors
from backend.protocol.types import EngineName, InstallProgress

ProgressSink = Callable[[InstallProgress], None]
CHUNK = 256 * 1024


async def install(
    manifest: Manifest,
    *,
    install_dir: Path,
    session: aiohttp.ClientSession,
    values: dict[str, str],
    output: EngineLog,
    progress: ProgressSink,
) -> None:
    """Run the manifest's installer; raises with an actionable message on failure."""
    spec = manifest.install
    if spec is None:
        raise errors.InvalidParams(
            f"{manifest.display_name} has no installer PAIR can run on this computer; "
            "install it from its website, then PAIR will find it"
        )
    report = Reporter(EngineName(manifest.engine), progress)
    name = manifest.display_name
    try:
        download = None
        if spec.url is not None:
            download = await download_file(
                spec.url,
                sha256=spec.sha256,
                target=install_dir.parent / f"{install_dir.name}.download",
                session=session,
                report=report,
                name=name,
                advice=f"or install {name} yourself and PAIR will find it",
                nothing_done="nothing was installed",
            )
            if spec.archive is not None:
                report.stage("unpacking")
                await asyncio.to_thread(unpack, download, spec.archive, install_dir)
        if spec.run is not None:
            report.stage("running the installer")
            argv = expand_all(spec.run, {**values, "download": str(download or "")})
            result = await run_command(argv, timeout=3600, output=output)
            if result.code != 0:
                raise errors.InternalError(f"the installer failed: {result.describe()}")
    except errors.RpcError as exc:
        report.fail(exc.message)
        raise
    report.done()


async def uninstall(
    manifest: Manifest, *, install_dir: Path, values: dict[str, str], output: EngineLog
) -> None:
    """Remove what PAIR installed; the model store is never touched."""
    if manifest.uninstall is not None and manifest.uninstall.run:
        result = await run_command(
            expand_all(manifest.uninstall.run, values), timeout=600, output=output
        )
        if result.code != 0:
            raise errors.InternalError(f"uninstall failed: {result.describe()}")
        return
    if not await asyncio.to_thread(install_dir.is_dir):
        raise errors.Conflict(
            f"PAIR did not install {manifest.display_name}, so it will not remove it; "
            "uninstall it the way it was installed"
        )
    await asyncio.to_thread(shutil.rmtree, install_dir)


async def download_file(
    url: str,
    *,
    sha256: str | None,
    target: Path,
    session: aiohttp.ClientSession,
    report: Reporter,
    name: str,
    advice: str,
    nothing_done: str,
) -> Path:
    """Download ``url`` to ``target`` with measured progress; a pinned ``sha256`` must match.

    Fails with an actionable message: ``advice`` says what else to do when offline,
    ``nothing_done`` what a checksum mismatch left as it was.
    """
    await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
    digest = hashlib.sha256()
    try:
        async with session.get(
            url, timeout=aiohttp.ClientTimeout(sock_connect=20, sock_read=60)
        ) as response:
            if response.status != 200:
                raise errors.Unavailable(f"downloading {url} failed: HTTP {response.status}")
            await _save(response, target, digest, report)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise errors.Unavailable(
            f"cannot download {name} from {url} ({exc or type(exc).__name__}); check the "
            f"internet connection, {advice}"
        ) from None
    if sha256 is not None and digest.hexdigest() != sha256.lower():
        await asyncio.to_thread(target.unlink, missing_ok=True)
        raise errors.InternalError(
            f"the download of {name} does not match its pinned checksum; {nothing_done}"
        )
    return target


async def _save(
    response: aiohttp.ClientResponse, target: Path, digest: hashlib._Hash, report: Reporter
) -> None:
    total = response.content_length
    done = 0
    with target.open("wb") as handle:
        async for chunk in response.content.iter_chunked(CHUNK):
            handle.write(chunk)
            digest.update(chunk)
            done += len(chunk)
            report.stage("downloading", 100 * done / total if total else None)


def unpack(archive: Path, kind: str, install_dir: Path) -> None:
    """Unpack ``archive`` into a fresh ``install_dir`` and delete it (blocking: in a thread)."""
    if install_dir.exists():
        shutil.rmtree(install_dir)
    install_dir.mkdir(parents=True)
    if kind == "tar":
        with tarfile.open(archive) as bundle:
            bundle.extractall(install_dir, filter="data")
    else:
        with zipfile.ZipFile(archive) as bundle:
            bundle.extractall(install_dir)
    archive.unlink()


class Reporter:
    """Sends one engine's ``InstallProgress``: coalesced stages, then one ``done`` step."""

    def __init__(self, engine: EngineName, sink: ProgressSink) -> None:
        self._engine, self._sink = engine, sink
        self._last: tuple[str, int | None] | None = None

    def stage(self, stage: str, percent: float | None = None) -> None:
        """A step under way (``percent`` only where it is measured)."""
        key = (stage, None if percent is None else int(percent))
        if key != self._last:  # coalesce to whole-percent changes
            self._last = key
            self._sink(
                InstallProgress(
                    engine=self._engine,
                    stage=stage,
                    percent=None if percent is None else round(percent, 1),
                )
            )

    def fail(self, message: str) -> None:
        """The last step: it failed with ``message``."""
        self._sink(InstallProgress(engine=self._engine, stage="error", done=True, error=message))

    def done(self, stage: str = "installed") -> None:
        """The last step: it worked."""
        self._sink(InstallProgress(engine=self._engine, stage=stage, percent=100.0, done=True))
