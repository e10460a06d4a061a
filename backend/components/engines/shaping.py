"""What a launch of a one-model engine adds to the manifest's command line, decided at launch.

llama.cpp's ``llama-server`` is started with GPU offload sized to the computer's free VRAM, or,
for a model spread over members, with the ``--rpc`` endpoints, ``--tensor-split`` and ``-ngl``
of the plan (``backend/components/split/host.py``). The engine run asks its shaper at every
launch (so a crash restart re-plans on the members there are then) and tells it when the
process is gone (so what the launch opened, the RPC tunnels, is closed).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import msgspec

from backend.protocol.types.engines import SpreadStatus


class LaunchExtras(msgspec.Struct, frozen=True):
    """Arguments appended to the manifest's, and environment variables added to its."""

    args: tuple[str, ...] = ()
    env: Mapping[str, str] = msgspec.field(default_factory=dict)


class LaunchShaper(Protocol):
    """Shapes each launch of one engine; raises an ``RpcError`` when the model cannot run."""

    async def shape(self, model: str, path: Path, across: tuple[str, ...] | None) -> LaunchExtras:
        """The extras for serving ``model`` (its file ``path``); ``across``: the members the
        user asked to spread it over (None: spread only when this computer cannot hold it)."""
        ...

    async def released(self, *, crashed: bool) -> None:
        """The launched process is gone (stopped, or ``crashed``): close what ``shape`` opened."""
        ...

    def spread(self) -> SpreadStatus | None:
        """The spread the engine runs (or last ran, degraded), None when on this computer alone."""
        ...
