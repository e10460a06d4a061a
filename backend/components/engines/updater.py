"""Updating an engine PAIR installed, as its manifest's ``update`` section describes.

Everything that can fail without touching the installed engine happens in ``stage``: the
download, its checksum, unpacking beside the install dir, a staging command. Only ``replace``
(run while the engine is stopped) changes what is installed; an unpacked archive keeps the
previous install dir aside until ``discard``, so ``restore`` can put it back.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import msgspec

from backend.components.engines.accel import DetectedGpu
from backend.components.engines.commands import run_command
from backend.components.engines.install import (
    Fetch,
    Reporter,
    asset_values,
    chosen_archive,
    complete_archive,
    download_file,
    listed_sha256,
    unpack,
)
from backend.components.engines.manifest import Manifest, UpdateSpec
from backend.components.engines.process import EngineLog
from backend.components.engines.templating import expand, expand_all
from backend.protocol import errors

COMMAND_TIMEOUT_S = 3600.0
LEFT_AS_IT_IS = "the installed version is left as it is"


class UpdatePaths(msgspec.Struct, frozen=True):
    """The folders an update of the engine installed in ``install_dir`` uses beside it."""

    install_dir: Path

    @property
    def staging(self) -> Path:
        """The new version, unpacked (or the staging command's folder)."""
        return self.install_dir.with_name(f"{self.install_dir.name}.update")

    @property
    def download(self) -> Path:
        """The downloaded file."""
        return self.install_dir.with_name(f"{self.install_dir.name}.update.download")

    @property
    def previous(self) -> Path:
        """The replaced version, kept until the new one runs."""
        return self.install_dir.with_name(f"{self.install_dir.name}.previous")


def refusal(
    manifest: Manifest, *, adopted: bool, binary: Path | None, installed_by_pair: bool
) -> str | None:
    """Why PAIR will not update the engine, or None when it may.

    An adopted engine is never touched; PAIR updates only what it installed itself.
    """
    name = manifest.display_name
    if adopted:
        return (
            f"{name} on port {manifest.runtime.port} was already running when PAIR found it; "
            "PAIR did not start it, so it will not update it; update it where it was started"
        )
    if binary is None:
        return f"{name} is not installed on this computer; install it first"
    if manifest.update is None:
        return (
            f"PAIR cannot update {name} on this computer; update it with its own updater or "
            "the way it was installed"
        )
    if not installed_by_pair:
        return f"{name} at {binary} was installed outside PAIR; update it the way it was installed"
    return None


def spec_of(manifest: Manifest) -> UpdateSpec:
    """The manifest's update section (the controller checked there is one)."""
    assert manifest.update is not None, "only an engine with an update section is updated"
    return manifest.update


async def stage(
    manifest: Manifest,
    version: str,
    *,
    install_dir: Path,
    binary: Path,
    session: aiohttp.ClientSession,
    values: dict[str, str],
    output: EngineLog,
    report: Reporter,
    gpus: Sequence[DetectedGpu] | None = None,
) -> dict[str, str]:
    """Get ``version`` ready beside the installed one; returns the values ``replace`` needs.
    llama.cpp's archive is the build for ``gpus`` (None: this computer's), as installed.

    Fails (leaving the installed engine as it is) when the download fails, does not match
    its checksum, lacks the executable, or the staging command fails.
    """
    spec, paths = spec_of(manifest), UpdatePaths(install_dir)
    await discard(install_dir)  # what an interrupted update left
    values = {**values, "version": version, "staging": str(paths.staging), "download": ""}
    try:
        values.update(asset_values(manifest, values))
        choice = await chosen_archive(manifest, gpus) if spec.url is not None else None
        if choice is not None:
            values["asset"] = expand(choice.asset, values)
        if spec.url is not None:
            download = await _fetch(manifest, version, paths, binary, session, values, report)
            values["download"] = str(download)
        if choice is not None:
            advice = f"or try again later; {LEFT_AS_IT_IS}"
            fetch = Fetch(spec, session, report, manifest.display_name, advice, LEFT_AS_IT_IS)
            await complete_archive(fetch, choice, values, paths.staging)
        if spec.stage is not None:
            report.stage("preparing")
            await asyncio.to_thread(paths.staging.mkdir, parents=True, exist_ok=True)
            await _run(spec.stage, values, output, "preparing the update failed")
    except BaseException:
        await asyncio.shield(discard(install_dir))
        raise
    return values


async def _fetch(
    manifest: Manifest,
    version: str,
    paths: UpdatePaths,
    binary: Path,
    session: aiohttp.ClientSession,
    values: dict[str, str],
    report: Reporter,
) -> Path:
    """Download (and check) the new version, and unpack it into the staging folder."""
    spec = spec_of(manifest)
    assert spec.url is not None
    url = expand(spec.url, values)
    name = f"{manifest.display_name} {version}"
    listed = None
    if spec.sha256 is None and spec.sha256_url is not None:
        listed = await listed_sha256(
            expand(spec.sha256_url, values),
            url,
            session=session,
            name=manifest.display_name,
            nothing_done=LEFT_AS_IT_IS,
        )
    download = await download_file(
        url,
        sha256=spec.sha256 or listed,
        target=paths.download,
        session=session,
        report=report,
        name=name,
        advice=f"or try again later; {LEFT_AS_IT_IS}",
        nothing_done=LEFT_AS_IT_IS,
    )
    if spec.archive is not None:
        report.stage("unpacking")
        await asyncio.to_thread(
            unpack, download, spec.archive, paths.staging, unwrap=spec.unwrap, name=name
        )
        await asyncio.to_thread(_check_unpacked, paths, binary, name)
    return download


async def replace(
    manifest: Manifest, *, install_dir: Path, values: dict[str, str], output: EngineLog
) -> None:
    """Put the staged version in place of the installed one (the engine is stopped)."""
    spec = spec_of(manifest)
    if spec.archive is not None:
        await asyncio.to_thread(_swap, UpdatePaths(install_dir))
    if spec.run is not None:
        await _run(spec.run, values, output, "the update failed")


async def restore(manifest: Manifest, install_dir: Path) -> bool:
    """Put the replaced version back, where the install kind kept it; whether it did."""
    if spec_of(manifest).archive is None:
        return False  # a command replaces in place (pip rolls a failed install back itself)
    return await asyncio.to_thread(_restore, UpdatePaths(install_dir))


async def discard(install_dir: Path) -> None:
    """Remove the staged version, the download and the replaced version."""
    await asyncio.to_thread(_discard, UpdatePaths(install_dir))


async def _run(template: list[str], values: dict[str, str], output: EngineLog, what: str) -> None:
    result = await run_command(
        expand_all(template, values), timeout=COMMAND_TIMEOUT_S, output=output
    )
    if result.code != 0:
        raise errors.InternalError(f"{what}: {result.describe()}")


def _check_unpacked(paths: UpdatePaths, binary: Path, name: str) -> None:
    try:
        relative = binary.resolve().relative_to(paths.install_dir.resolve())
    except ValueError:
        raise errors.Conflict(
            f"{binary} is not in PAIR's install folder {paths.install_dir}, so an archive "
            "cannot replace it"
        ) from None
    fresh = paths.staging / relative
    if not (fresh.is_file() and os.access(fresh, os.X_OK)):
        raise errors.InternalError(
            f"the download of {name} has no executable {relative}; the installed version is "
            "left as it is"
        )


def _swap(paths: UpdatePaths) -> None:
    if paths.previous.exists():
        shutil.rmtree(paths.previous)
    paths.install_dir.rename(paths.previous)
    try:
        paths.staging.rename(paths.install_dir)
    except OSError:
        paths.previous.rename(paths.install_dir)
        raise


def _restore(paths: UpdatePaths) -> bool:
    if not paths.previous.is_dir():
        return False
    if paths.install_dir.exists():
        shutil.rmtree(paths.install_dir)
    paths.previous.rename(paths.install_dir)
    return True


def _discard(paths: UpdatePaths) -> None:
    for folder in (paths.staging, paths.previous):
        if folder.exists():
            shutil.rmtree(folder)
    paths.download.unlink(missing_ok=True)
