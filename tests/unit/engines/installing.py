"""The engine installer run as the install tests run it: no values, a fresh log, and every
progress report kept for the test to read."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import aiohttp

from backend.components.engines import install as installer
from backend.components.engines.accel import DetectedGpu
from backend.components.engines.commands import CommandRunner, run_command
from backend.components.engines.manifest import Manifest
from backend.components.engines.process import EngineLog
from backend.protocol.types.engines import InstallProgress


async def install_reporting(
    manifest: Manifest,
    session: aiohttp.ClientSession,
    install_dir: Path,
    *,
    gpus: Sequence[DetectedGpu] | None = None,
    run: CommandRunner = run_command,
    progress: list[InstallProgress] | None = None,
) -> list[InstallProgress]:
    """Install ``manifest`` into ``install_dir``; the progress it reported, in order (also
    into ``progress`` as it comes, for a test whose install raises). ``gpus`` and ``run`` as
    ``install.install`` takes them."""
    progress = [] if progress is None else progress
    await installer.install(
        manifest,
        install_dir=install_dir,
        session=session,
        values={},
        output=EngineLog(),
        progress=progress.append,
        gpus=gpus,
        run=run,
    )
    return progress
