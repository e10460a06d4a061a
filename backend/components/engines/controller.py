"""One engine's lifecycle commands: start (or adopt), stop, restart, switch the model of a
one-model engine, install, update, uninstall and port changes. Each holds the engine's lock
while it takes the steps of ``engine_run.EngineRun``; an update stages its download first,
holding only the update lock, and waits for the exclusive gate before it stops the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from backend.components.engines import install as installer
from backend.components.engines import lifecycle, updater
from backend.components.engines import versions as releases
from backend.components.engines.detect import installed_by_pair
from backend.components.engines.engine_run import EngineHooks, EngineRun
from backend.components.engines.manifest import Manifest
from backend.protocol import errors
from backend.protocol.types.engines import EngineStatus, EngineVersions, InstallProgress

__all__ = ["EngineController", "EngineHooks"]

Hold = Callable[[], AbstractAsyncContextManager[None]]


@contextlib.asynccontextmanager
async def _granted() -> AsyncIterator[None]:
    yield


class EngineController(EngineRun):
    """The commands on one engine (the state and steps are ``EngineRun``'s)."""

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, *, explicit: bool = True) -> EngineStatus:
        """Start (or adopt) the engine and wait until it is ready."""
        async with self._lock:
            await self._require_startable()
            await self._command("start", explicit=explicit)
            if not self.running:
                await self._start_locked()
            return self.status()

    async def stop(self, *, explicit: bool = True) -> EngineStatus:
        """Stop an engine PAIR started; refuse (but remember the intent) for an adopted one."""
        async with self._lock:
            await self._command("stop", explicit=explicit)
            await self._stop_locked()
            return self.status()

    async def restart(self, *, kill: bool = False) -> EngineStatus:
        """Stop and start again (an adopted engine is refused); ``kill``: a process PAIR
        started is killed at once rather than asked to stop (it is stuck: a spread model's
        member is gone, and llama.cpp waits on it instead of finishing its requests)."""
        async with self._lock:
            await self._command("restart")
            with self._relaunch(self.running):
                await self._stop_locked(kill=kill)
                await self._start_locked()
            return self.status()

    async def switch_model(self, model: str, across: tuple[str, ...] | None = None) -> EngineStatus:
        """Relaunch a store engine on ``model`` (start it with it when stopped) and remember
        the choice once it runs. A model not in the store raises ``NotFound`` before anything
        stops; one the engine cannot load leaves it failed, the error carrying its output.
        ``across``: the members to spread it over (None: as it runs when it is the model served,
        else only when this computer cannot hold it; empty: this computer alone); asking for
        another spread of the model it serves relaunches it."""
        store = self._require_store()
        await asyncio.to_thread(store.get, model)
        async with self._lock:
            if self._life.adopted and self.running:
                raise errors.Conflict(
                    f"{self.manifest.display_name} on port {self.port} was not started by PAIR, "
                    "so PAIR cannot load another model into it",
                    {"engine": self.name, "adopted": True},
                )
            if self.current_model == model and across in (None, self._across):
                return self.status()
            running = self.running
            self._across = across
            await self._require_startable()
            await self._command("restart" if running else "start", explicit=not running)
            with self._relaunch(running):
                await self._stop_locked()
                await self._start_locked(model)
            self._settings.remember_model(self.name, model)
            return self.status()

    async def shutdown(self) -> None:
        """Stop what PAIR started, keep the desired state; never touches adopted engines."""
        async with self._lock:
            await self._command("shutdown")
            if self.owned:
                await self._stop_owned()
        await self._tasks.close(timeout=2.0)

    async def install(self, progress: installer.ProgressSink) -> EngineStatus:
        """Install with the manifest's installer; an engine already found is left as it is."""
        async with self._lock:
            await self._command("install")
            if await self.detect():
                progress(
                    InstallProgress(
                        engine=self.name, stage="already installed", percent=100.0, done=True
                    )
                )
                return self.status()
            await installer.install(
                self.manifest,
                install_dir=self.install_dir,
                session=self._session,
                values=self.placeholder_values(),
                output=self.output,
                progress=progress,
            )
            if not await self.detect():
                raise errors.InternalError(
                    f"{self.manifest.display_name} was installed but PAIR cannot find it"
                )
            return self.status()

    async def install_and_start(self, progress: installer.ProgressSink) -> EngineStatus:
        """Install, then start the engine (recording that it is wanted), as ``engine:install``
        does. A model-store engine whose store holds no model yet has nothing to serve, so it
        stays stopped; a start that fails says the install itself succeeded."""
        await self.install(progress)
        if self.store is not None and not await asyncio.to_thread(self.store.list):
            return self.status()
        try:
            return await self.start()
        except errors.RpcError as exc:
            raise type(exc)(
                f"{self.manifest.display_name} is installed, but it did not start: {exc.message}",
                exc.data,
            ) from exc

    async def uninstall(self) -> EngineStatus:
        """Remove an engine PAIR installed (stopping it first); the model store stays."""
        async with self._lock:
            await self._command("uninstall")
            await self._stop_locked()
            await installer.uninstall(
                self.manifest,
                install_dir=self.install_dir,
                values=self.placeholder_values(),
                output=self.output,
            )
            await self.detect()
            return self.status()

    async def versions(self) -> EngineVersions:
        """The installed and the latest version and whether PAIR can update; never locks."""
        return releases.summary(
            self.name,
            self.manifest.display_name,
            installed=await self._installed_version(),
            latest=await self._latest_release(fresh=False),
            refusal=await self._update_refusal(),
            found=self._life.installed,
            label=await releases.version_label(
                self.manifest.version, binary=self._life.binary, values=self.placeholder_values()
            ),
        )

    async def update(self, progress: installer.ProgressSink, hold: Hold = _granted) -> EngineStatus:
        """Put the latest version in place of the one PAIR installed; what ran runs again
        and the desired state stays as it was. Progress as install progress.

        The download and staging run first, holding only the update lock; the stop, swap and
        start run inside ``hold`` (the exclusive gate) and then the engine's lock.
        """
        async with self._updating:
            await self._refuse_update()
            report = installer.Reporter(self.name, progress)
            try:
                await self._update_staged(report, hold)
            except BaseException as exc:
                report.fail(_failure_text(exc))
                raise
            return self.status()

    async def _refuse_update(self) -> None:
        refusal = await self._update_refusal()
        if refusal is not None:
            raise errors.Conflict(refusal, {"engine": self.name})

    async def replace_manifest(self, manifest: Manifest) -> EngineStatus:
        """Adopt a new manifest (a port change): a running owned engine restarts on it."""
        async with self._lock:
            if self._life.adopted and self.running:
                raise errors.Conflict(
                    f"{self.manifest.display_name} was already running when PAIR found it; "
                    "PAIR did not start it, so it cannot move it to another port"
                )
            was_running = self.running
            self._apply(lifecycle.PortChanged())
            with self._relaunch(was_running):
                if was_running:
                    await self._stop_locked()
                self.manifest = manifest
                if was_running:
                    await self._start_locked()
            self._notify()
            return self.status()

    async def _installed_version(self) -> str | None:
        owned_process = self._life.owner == "process" and self.running
        return await releases.installed_version(
            self.manifest.version,
            binary=self._life.binary,
            serving_url=self.base_url() if owned_process else None,
            session=self._session,
            values=self.placeholder_values(),
        )

    async def _latest_release(self, *, fresh: bool) -> releases.Latest:
        spec = self.manifest.latest
        if spec is None:
            return releases.Latest(None, "its manifest names no place that announces releases")
        return await self._latest.get(
            lambda: releases.latest_version(spec, self._session), fresh=fresh
        )

    async def _update_refusal(self) -> str | None:
        binary = self._life.binary
        ours = binary is not None and await asyncio.to_thread(
            installed_by_pair, self.manifest.detect, binary, self.install_dir
        )
        return updater.refusal(
            self.manifest, adopted=self._life.adopted, binary=binary, installed_by_pair=ours
        )

    async def _update_staged(self, report: installer.Reporter, hold: Hold) -> None:
        report.stage("checking for a new version")
        latest = await self._latest_release(fresh=True)
        if latest.version is None:
            raise errors.Unavailable(
                f"cannot learn the latest version of {self.manifest.display_name}: "
                f"{latest.problem}; check the internet connection"
            )
        installed = await self._installed_version()
        if installed is not None and not releases.is_newer(latest.version, installed):
            report.done("up to date")
            return  # nothing to replace: no restart
        assert self._life.binary is not None, "the refusal check found the executable"
        values = await updater.stage(
            self.manifest,
            latest.version,
            install_dir=self.install_dir,
            binary=self._life.binary,
            session=self._session,
            values=self.placeholder_values(),
            output=self.output,
            report=report,
        )
        try:
            async with hold(), self._lock:
                await self._command("update")
                await self._refuse_update()  # adopted or removed while it was staged
                with self._relaunch(self.running):
                    await self._replace_and_restart(latest.version, values, report)
        finally:
            await asyncio.shield(updater.discard(self.install_dir))
        report.done("updated")

    async def _replace_and_restart(
        self, version: str, values: dict[str, str], report: installer.Reporter
    ) -> None:
        """Stop, put the staged version in place, start again if it ran or is wanted;
        a new version that does not start gives way to the previous one."""
        restart = self.running or self._life.desired is True
        report.stage("replacing")
        await self._stop_locked()
        try:
            await updater.replace(
                self.manifest, install_dir=self.install_dir, values=values, output=self.output
            )
        except BaseException:
            await asyncio.shield(self._put_back(restart))
            raise
        if not await self.detect():
            await self._put_back(restart)
            raise errors.InternalError(
                f"{self.manifest.display_name} {version} was installed but PAIR cannot find it"
            )
        if restart:
            report.stage("restarting")
            try:
                await self._start_locked()
            except errors.RpcError as exc:
                if not await self._put_back(restart):
                    raise
                raise errors.InternalError(
                    f"{self.manifest.display_name} {version} did not start ({exc.message}); "
                    "the previous version is back in place"
                ) from None

    async def _put_back(self, restart: bool) -> bool:
        """Restore the replaced version where the install kind kept it, and start what ran."""
        restored = await updater.restore(self.manifest, self.install_dir)
        await self.detect()
        if restart and self._life.installed:
            with contextlib.suppress(errors.RpcError):
                await self._start_locked()
        return restored


def _failure_text(exc: BaseException) -> str:
    if isinstance(exc, errors.RpcError):
        return exc.message
    if isinstance(exc, asyncio.CancelledError):
        return "the update was cancelled"
    return str(exc) or type(exc).__name__
