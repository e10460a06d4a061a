"""What a local engine's scheduler asks of the engine (``EngineAccess``): its idle slots, and
erasing, parking and restoring one (over HTTP, as the engine's slot API says), and a model
switch (the broker relaunches it)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import msgspec

from backend.protocol.proxy import PARKED_PREFIX, RouteTarget
from backend.workers.proxy.scheduler.rules import SlotSample

SLOTS_TIMEOUT_S = 2.0
ERASE_TIMEOUT_S = 10.0
# A slot's KV can be gigabytes for a large model and context.
PARK_TIMEOUT_S = 120.0
MAX_SLOT_ROWS = 4096

LoadModel = Callable[[str, str], Awaitable[int]]


class LoadFailed(Exception):
    """The engine would not load a model; the message is the engine's reason."""


class EngineAccess(Protocol):
    """What the scheduler asks of its engine (HTTP to the engine, RPC to the broker)."""

    async def free_slots(self) -> SlotSample | None:
        """The idle slots now, or None when they cannot be read (then the ceiling decides)."""
        ...

    async def erase(self, slot: int) -> None:
        """Erase one slot's KV; raises when the engine did not."""
        ...

    async def load(self, model: str) -> int:
        """Relaunch the drained engine with ``model``; its new instance, or ``LoadFailed``."""
        ...

    async def save(self, slot: int, filename: str) -> int:
        """Park ``slot``'s KV in ``filename``; the bytes written (raises when it did not)."""
        ...

    async def restore(self, slot: int, filename: str) -> None:
        """Load a parked KV into ``slot`` (raises when it did not)."""
        ...

    async def discard(self, filenames: list[str]) -> None:
        """Delete parked files nobody needs any more."""
        ...


class LocalEngineAccess:
    """One engine of this node, as its routing-table entry describes it now."""

    def __init__(
        self,
        engine: str,
        session: aiohttp.ClientSession,
        target: Callable[[], RouteTarget | None],
        load_model: LoadModel,
    ) -> None:
        self._engine = engine
        self._session = session
        self._target = target
        self._load_model = load_model

    async def free_slots(self) -> SlotSample | None:
        """``GET`` the slot list: idle rows (``is_processing`` false) and their ids."""
        target = self._target()
        if target is None or target.slot_api is None:
            return None
        url = target.base_url.rstrip("/") + target.slot_api.list_path
        timeout = aiohttp.ClientTimeout(total=SLOTS_TIMEOUT_S)
        async with self._session.get(url, timeout=timeout) as response:
            if response.status != 200:
                return None
            rows = msgspec.json.decode(await response.read())
        return idle_slots(rows)

    async def erase(self, slot: int) -> None:
        """``POST`` the erase action of ``slot``; raises unless the engine says it did."""
        target = self._target()
        if target is None or target.slot_api is None:
            raise RuntimeError(f"{self._engine} has no slot API")
        url = target.base_url.rstrip("/") + target.slot_api.erase_path.format(id=slot)
        timeout = aiohttp.ClientTimeout(total=ERASE_TIMEOUT_S)
        async with self._session.post(url, timeout=timeout) as response:
            if response.status >= 300:
                text = (await response.text(errors="replace"))[:200]
                raise RuntimeError(f"erase answered {response.status}: {text}")

    async def save(self, slot: int, filename: str) -> int:
        """Save ``slot``'s KV to ``filename`` in the engine's slot folder; the bytes written.
        Raises when the engine cannot park slots or did not."""
        answer = await self._slot_action("save_path", slot, filename)
        written = answer.get("n_written") if isinstance(answer, dict) else None
        return written if isinstance(written, int) and not isinstance(written, bool) else 0

    async def restore(self, slot: int, filename: str) -> None:
        """Load ``filename`` into ``slot``; raises when the engine did not."""
        await self._slot_action("restore_path", slot, filename)

    async def discard(self, filenames: list[str]) -> None:
        """Delete parked files no session needs any more (in a thread: file system work)."""
        target = self._target()
        folder = target.slot_api.park_dir if target and target.slot_api else None
        if folder is None or not filenames:
            return
        await asyncio.to_thread(_unlink_all, Path(folder), filenames)

    async def _slot_action(self, which: str, slot: int, filename: str) -> Any:
        target = self._target()
        api = target.slot_api if target is not None else None
        path = getattr(api, which, None) if api is not None else None
        if target is None or not isinstance(path, str):
            raise RuntimeError(f"{self._engine} cannot park slots")
        url = target.base_url.rstrip("/") + path.format(id=slot)
        timeout = aiohttp.ClientTimeout(total=PARK_TIMEOUT_S)
        async with self._session.post(
            url, json={"filename": filename}, timeout=timeout
        ) as response:
            if response.status >= 300:
                text = (await response.text(errors="replace"))[:200]
                raise RuntimeError(f"{which.split('_')[0]} answered {response.status}: {text}")
            return msgspec.json.decode(await response.read())

    async def load(self, model: str) -> int:
        """Ask the broker to relaunch the engine with ``model``."""
        try:
            return await self._load_model(self._engine, model)
        except LoadFailed:
            raise
        except Exception as exc:
            raise LoadFailed(str(exc) or type(exc).__name__) from exc


def idle_slots(rows: Any) -> SlotSample | None:
    """The idle slots of a llama-server ``/slots`` answer (a pure function); None when it is
    not a list of slot rows."""
    if not isinstance(rows, list) or len(rows) > MAX_SLOT_ROWS:
        return None
    ids: list[int] = []
    for row in rows:
        if not isinstance(row, dict):
            return None
        slot, busy = row.get("id"), row.get("is_processing")
        if not isinstance(slot, int) or isinstance(slot, bool) or not isinstance(busy, bool):
            return None
        if not busy:
            ids.append(slot)
    return SlotSample(idle=len(ids), ids=tuple(sorted(ids)))


def _unlink_all(folder: Path, filenames: list[str]) -> None:
    for name in filenames:
        # Only a bare name of ours: never a path that leaves the folder.
        if "/" in name or "\\" in name or not name.startswith(PARKED_PREFIX):
            continue
        with contextlib.suppress(OSError):
            (folder / name).unlink()
