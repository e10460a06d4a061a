"""Installing and uninstalling engines as their manifests describe, with honest progress.

Downloads report measured percentages when the server sends a length; unpacking and running an
installer are stages without a percentage. A checksum, pinned or listed by the publisher, must
match or nothing is installed. An install URL may name the latest release (``{version}``, from
the manifest's ``latest``) and this platform's file of it (``{asset}``). An installer PAIR runs
(``run``) is downloaded under a name Windows can run it by and removed once it ran.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

import aiohttp
import msgspec

from backend.components.engines.accel import ArchiveChoice, DetectedGpu
from backend.components.engines.archive_choice import (
    accelerated_archive,
    detected_gpus,
    merge_folder,
    takes_accelerated_archive,
)
from backend.components.engines.backend_label import write_archive_backend
from backend.components.engines.checksums import checksum_for as checksum_for
from backend.components.engines.checksums import listed_sha256 as listed_sha256
from backend.components.engines.commands import CommandRunner, run_command
from backend.components.engines.manifest import (
    InstallSpec,
    Manifest,
    UpdateSpec,
    platform_keys,
    release_asset,
)
from backend.components.engines.process import EngineLog
from backend.components.engines.templating import expand, expand_all
from backend.components.engines.unpacking import unpack as unpack
from backend.components.engines.versions import VersionUnknown, latest_version
from backend.protocol import errors
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import InstallProgress

ProgressSink = Callable[[InstallProgress], None]
CHUNK = 256 * 1024
INSTALLER_TIMEOUT_S = 3600.0
# Windows picks the program that runs a file by its extension, and PowerShell's -File takes
# only a script named .ps1: a download to run keeps these extensions.
RUN_BY_EXTENSION = frozenset({".ps1", ".exe", ".msi", ".bat", ".cmd"})


async def install(
    manifest: Manifest,
    *,
    install_dir: Path,
    session: aiohttp.ClientSession,
    values: dict[str, str],
    output: EngineLog,
    progress: ProgressSink,
    gpus: Sequence[DetectedGpu] | None = None,
    run: CommandRunner = run_command,
) -> None:
    """Run the manifest's installer; raises with an actionable message on failure. llama.cpp's
    release archive is the build for ``gpus`` (None: the GPUs found on this computer); ``run``
    runs an installer command."""
    spec = manifest.install
    if spec is None:
        raise errors.InvalidParams(
            f"{manifest.display_name} has no installer PAIR can run on this computer; "
            f"install it from {manifest.download_page or 'its website'}, then PAIR will find it"
        )
    report = Reporter(EngineName(manifest.engine), progress)
    name = manifest.display_name
    yourself = install_yourself(manifest)
    advice = f"or {yourself}"
    try:
        download = None
        if spec.url is not None:
            values = await _release_values(manifest, values, session, report, advice)
            choice = await chosen_archive(manifest, gpus)
            if choice is not None:
                values = {**values, "asset": expand(choice.asset, values)}
            fetch = Fetch(spec, session, report, name, advice)
            download = await fetch.fetch(values, install_dir, spec.sha256)
            if choice is not None:
                await complete_archive(fetch, choice, values, install_dir)
        if spec.run is not None:
            argv = expand_all(spec.run, {**values, "download": str(download or "")})
            await run_installer(
                argv, download, run=run, output=output, report=report, advice=yourself
            )
    except errors.RpcError as exc:
        report.fail(exc.message)
        raise
    report.done()


def install_yourself(manifest: Manifest) -> str:
    """What a person can do where PAIR's installer cannot: install it themselves (from the
    manifest's download page, where it names one)."""
    page = f" from {manifest.download_page}" if manifest.download_page else ""
    return f"install {manifest.display_name} yourself{page} and PAIR will find it"


async def run_installer(
    argv: list[str],
    download: Path | None,
    *,
    run: CommandRunner,
    output: EngineLog,
    report: Reporter,
    advice: str,
) -> None:
    """Run an installer command (``download``: the installer it runs, removed afterwards);
    ``InternalError`` with its exit status, last lines and ``advice`` when it fails."""
    report.stage("running the installer")
    try:
        result = await run(argv, timeout=INSTALLER_TIMEOUT_S, output=output)
    finally:
        if download is not None:
            await asyncio.shield(asyncio.to_thread(download.unlink, missing_ok=True))
    if result.code != 0:
        raise errors.InternalError(f"the installer failed: {result.describe()}; {advice}")


def download_target(target: Path, url: str) -> Path:
    """The file ``url`` is downloaded to for ``target``: beside it, ``<name>.download``, with
    the URL's extension where Windows runs a file by it (``lmstudio.download.ps1``)."""
    suffix = PurePosixPath(unquote(urlsplit(url).path)).suffix.lower()
    kept = suffix if suffix in RUN_BY_EXTENSION else ""
    return target.parent / f"{target.name}.download{kept}"


class Fetch(msgspec.Struct, frozen=True):
    """Downloads (checked) and unpacks the files of one install or update spec's release;
    ``advice`` and ``nothing_done`` say what a failure leaves the user to do and as it was."""

    spec: InstallSpec | UpdateSpec
    session: aiohttp.ClientSession
    report: Reporter
    name: str
    advice: str
    nothing_done: str = "nothing was installed"

    async def fetch(self, values: dict[str, str], target: Path, sha256: str | None) -> Path:
        """Download ``url`` as ``values`` fill it, checked against ``sha256`` (else the
        checksum ``sha256_url`` lists), and unpack it into a fresh ``target``."""
        spec, nothing_done = self.spec, self.nothing_done
        assert spec.url is not None
        url = expand(spec.url, values)
        if sha256 is None and spec.sha256_url is not None:
            sha256 = await listed_sha256(
                expand(spec.sha256_url, values),
                url,
                session=self.session,
                name=self.name,
                nothing_done=nothing_done,
            )
        download = await download_file(
            url,
            sha256=sha256,
            target=download_target(target, url),
            session=self.session,
            report=self.report,
            name=self.name,
            advice=self.advice,
            nothing_done=nothing_done,
        )
        if spec.archive is not None:
            self.report.stage("unpacking")
            await asyncio.to_thread(
                unpack, download, spec.archive, target, unwrap=spec.unwrap, name=self.name
            )
        return download


async def chosen_archive(
    manifest: Manifest, gpus: Sequence[DetectedGpu] | None
) -> ArchiveChoice | None:
    """llama.cpp's archive for ``gpus`` (None: this computer's); None for any other engine."""
    if not takes_accelerated_archive(manifest):
        return None
    found = gpus if gpus is not None else await asyncio.to_thread(detected_gpus)
    return accelerated_archive(manifest, found)


async def complete_archive(
    fetch: Fetch, choice: ArchiveChoice, values: dict[str, str], folder: Path
) -> None:
    """Add the runtime the chosen build needs (CUDA's DLLs) to the archive unpacked in
    ``folder`` and record the build's label there; a failure removes ``folder``."""
    scratch = folder.with_name(f"{folder.name}.runtime")
    try:
        if choice.runtime_asset is not None:
            await fetch.fetch({**values, "asset": choice.runtime_asset}, scratch, None)
            await asyncio.to_thread(merge_folder, scratch, folder)
        await asyncio.to_thread(write_archive_backend, folder, choice.backend)
    except BaseException:
        await asyncio.shield(asyncio.to_thread(_remove_folders, folder, scratch))
        raise


def _remove_folders(*folders: Path) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


async def _release_values(
    manifest: Manifest,
    values: dict[str, str],
    session: aiohttp.ClientSession,
    report: Reporter,
    advice: str,
) -> dict[str, str]:
    """``values`` with ``{version}`` (the latest release) and ``{asset}`` when the install
    URLs use them."""
    spec = manifest.install
    assert spec is not None and spec.url is not None
    # A pinned checksum leaves the listing unread: its {version} asks for no release.
    listing = spec.sha256_url if spec.sha256 is None else None
    templates = [spec.url, listing or ""]
    uses_asset = "{asset}" in spec.url
    if uses_asset:
        templates.append(asset_template(manifest))
    if not any("{version}" in text for text in templates):
        return {**values, **asset_values(manifest, values)} if uses_asset else values
    assert manifest.latest is not None, "the manifest check asks for 'latest'"
    report.stage("checking for the latest version")
    try:
        version = await latest_version(manifest.latest, session)
    except VersionUnknown as exc:
        raise errors.Unavailable(
            f"cannot learn the latest version of {manifest.display_name} ({exc}); check the "
            f"internet connection, {advice}"
        ) from None
    values = {**values, "version": version}
    return {**values, **asset_values(manifest, values)} if uses_asset else values


def asset_template(manifest: Manifest) -> str:
    """This platform's file name template of the manifest's ``assets``, or ``InvalidParams``
    saying that the engine publishes none for it."""
    template = release_asset(manifest.assets)
    if template is None:
        name = manifest.display_name
        raise errors.InvalidParams(
            f"{name} publishes no release archive for this computer ({platform_keys()[1]}); "
            f"install {name} yourself and PAIR will find it"
        )
    return template


def asset_values(manifest: Manifest, values: dict[str, str]) -> dict[str, str]:
    """``{asset}``: this platform's release file, its ``{version}`` filled in from ``values``;
    nothing for a manifest without ``assets``."""
    if not manifest.assets:
        return {}
    return {"asset": expand(asset_template(manifest), values)}


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
    """Download ``url`` to ``target`` with measured progress; ``sha256`` (pinned in the
    manifest, or listed by the engine's publisher) must match.

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
        await asyncio.to_thread(target.unlink, missing_ok=True)
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
