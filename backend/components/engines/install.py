"""Installing and uninstalling engines as their manifests describe, with honest progress.

Downloads report measured percentages when the server sends a length; unpacking and running an
installer are stages without a percentage. A checksum, pinned or listed by the publisher, must
match or nothing is installed. An install URL may name the latest release (``{version}``, from
the manifest's ``latest``) and this platform's file of it (``{asset}``).
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import re
import shutil
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp

from backend.components.engines.accel import ArchiveChoice, DetectedGpu
from backend.components.engines.archive_choice import (
    accelerated_archive,
    detected_gpus,
    merge_folder,
    takes_accelerated_archive,
)
from backend.components.engines.backend_label import write_archive_backend
from backend.components.engines.commands import run_command
from backend.components.engines.manifest import (
    InstallSpec,
    Manifest,
    UpdateSpec,
    platform_keys,
    release_asset,
)
from backend.components.engines.process import EngineLog
from backend.components.engines.templating import expand, expand_all
from backend.components.engines.versions import VersionUnknown, fetch_text, latest_version
from backend.protocol import errors
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import InstallProgress

ProgressSink = Callable[[InstallProgress], None]
CHUNK = 256 * 1024
LISTING_TIMEOUT_S = 30.0
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


async def install(
    manifest: Manifest,
    *,
    install_dir: Path,
    session: aiohttp.ClientSession,
    values: dict[str, str],
    output: EngineLog,
    progress: ProgressSink,
    gpus: Sequence[DetectedGpu] | None = None,
) -> None:
    """Run the manifest's installer; raises with an actionable message on failure. llama.cpp's
    release archive is the build for ``gpus`` (None: the GPUs found on this computer)."""
    spec = manifest.install
    if spec is None:
        raise errors.InvalidParams(
            f"{manifest.display_name} has no installer PAIR can run on this computer; "
            "install it from its website, then PAIR will find it"
        )
    report = Reporter(EngineName(manifest.engine), progress)
    name = manifest.display_name
    advice = f"or install {name} yourself and PAIR will find it"
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
            report.stage("running the installer")
            argv = expand_all(spec.run, {**values, "download": str(download or "")})
            result = await run_command(argv, timeout=3600, output=output)
            if result.code != 0:
                raise errors.InternalError(f"the installer failed: {result.describe()}")
    except errors.RpcError as exc:
        report.fail(exc.message)
        raise
    report.done()


@dataclass(frozen=True, slots=True)
class Fetch:
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
            target=target.parent / f"{target.name}.download",
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
    templates = [spec.url, spec.sha256_url or ""]
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


def unpack(
    archive: Path, kind: str, install_dir: Path, *, unwrap: bool = False, name: str = "engine"
) -> None:
    """Unpack ``archive`` into a fresh ``install_dir`` and delete it (blocking: in a thread).

    ``kind`` ``auto``: a zip or a tar as the file's content says. ``unwrap``: an archive that
    holds one folder and nothing beside it is unpacked from inside that folder. A broken
    archive leaves neither ``install_dir`` nor the download behind.
    """
    scratch = install_dir.with_name(f"{install_dir.name}.unpack")
    for leftover in (install_dir, scratch):
        if leftover.exists():
            shutil.rmtree(leftover)
    scratch.mkdir(parents=True)
    try:
        if kind == "zip" or (kind == "auto" and zipfile.is_zipfile(archive)):
            _unzip(archive, scratch)
        else:
            with tarfile.open(archive) as bundle:
                bundle.extractall(scratch, filter="data")
        root = _only_folder(scratch) if unwrap else None
        (root or scratch).rename(install_dir)
    except (tarfile.TarError, zipfile.BadZipFile, gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise errors.InternalError(
            f"the download of {name} is not an archive PAIR can unpack ({exc}); nothing was "
            "unpacked"
        ) from None
    finally:
        if scratch.exists():
            shutil.rmtree(scratch)
        archive.unlink(missing_ok=True)


def _unzip(archive: Path, target: Path) -> None:
    """Extract a zip keeping the executable bits Unix zips record (``zipfile`` drops them)."""
    with zipfile.ZipFile(archive) as bundle:
        for info in bundle.infolist():
            extracted = Path(bundle.extract(info, target))
            mode = (info.external_attr >> 16) & 0o777
            if info.create_system == 3 and mode and not info.is_dir():
                extracted.chmod((mode & 0o755) | 0o600)


def _only_folder(folder: Path) -> Path | None:
    entries = list(folder.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return None


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
