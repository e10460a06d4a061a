"""One engine's lifecycle: detect, adopt, start, stop, restart, port changes, crash handling.

Lifecycle operations hold the engine's lock; status reads and probes never do. What the
controller knows lives in one frozen ``Lifecycle`` changed only through ``lifecycle.apply``,
which also fences observations: a health probe or exit watcher reports the revision its run
began under, and a report about a run that a start, stop or port change has since ended
leaves the state as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from backend.common.tasks import TaskSet
from backend.components.engines import install as installer
from backend.components.engines import lifecycle, updater
from backend.components.engines import slots as slot_counts
from backend.components.engines import versions as releases
from backend.components.engines.detect import find_executable, installed_by_pair
from backend.components.engines.lifecycle import Command, Event, Lifecycle
from backend.components.engines.manifest import Manifest
from backend.components.engines.process import EngineLog, RunningProcess
from backend.components.engines.runner import REAL_DRIVERS, EngineDrivers, EngineRunner
from backend.components.engines.templating import expand_path
from backend.core.clock import Clock
from backend.core.supervisor import ErrorSink
from backend.protocol import errors
from backend.protocol.types import (
    EngineName,
    EngineStatus,
    EngineVersions,
    ErrorAction,
    InstallProgress,
)

log = logging.getLogger(__name__)

UNHEALTHY_AFTER = 3


@dataclass(frozen=True, slots=True)
class EngineHooks:
    """What a controller reports to and persists through."""

    errors: ErrorSink
    on_change: Callable[[EngineStatus], None]
    save_desired: Callable[[str, bool], Awaitable[None]]
    record_process: Callable[[str, int, float], Awaitable[None]]
    forget_process: Callable[[int], Awaitable[None]]


class EngineController:
    """Owns one engine's process (or daemon), its monitor tasks and its output ring."""

    def __init__(
        self,
        manifest: Manifest,
        *,
        session: aiohttp.ClientSession,
        clock: Clock,
        hooks: EngineHooks,
        install_dir: Path,
        desired: bool | None = None,
        drivers: EngineDrivers = REAL_DRIVERS,
    ) -> None:
        self.manifest = manifest
        self.install_dir = install_dir
        self.output = EngineLog()
        self._session = session
        self._clock = clock
        self._hooks = hooks
        self._runner = EngineRunner(drivers, session=session, clock=clock, output=self.output)
        self._lock = asyncio.Lock()
        self._tasks = TaskSet(f"engine:{manifest.engine}")
        self._life = Lifecycle(desired=desired)
        self._process: RunningProcess | None = None  # the live handle of ``_life.pid``
        self._latest = releases.LatestCache(clock)

    # -- reading ----------------------------------------------------------------------------

    @property
    def name(self) -> EngineName:
        """The engine's name (``ollama``, ``lmstudio``, ``llamacpp``)."""
        return EngineName(self.manifest.engine)

    @property
    def session(self) -> aiohttp.ClientSession:
        """The HTTP session shared by every engine of this node."""
        return self._session

    @property
    def host(self) -> str:
        """The loopback address the engine listens on."""
        return self.manifest.runtime.bind

    @property
    def port(self) -> int:
        """The engine's port (the manifest's, after overrides)."""
        return self.manifest.runtime.port

    @property
    def running(self) -> bool:
        """Whether the engine is serving now."""
        return self._life.running

    @property
    def owned(self) -> bool:
        """Whether PAIR started what runs (so PAIR may stop it)."""
        return self._life.owned

    def base_url(self) -> str:
        """``http://host:port`` of the engine."""
        return f"http://{self.host}:{self.port}"

    def status(self) -> EngineStatus:
        """A snapshot; never waits for a lifecycle operation."""
        return lifecycle.status_of(self.manifest, self._life)

    def placeholder_values(self, **extra: str) -> dict[str, str]:
        """Values for the manifest's placeholders."""
        runtime = self.manifest.runtime
        values = {
            "host": self.host,
            "port": str(self.port),
            "bin": str(self._life.binary or ""),
            "python": sys.executable,
            "install_dir": str(self.install_dir),
            "models_dir": expand_path(self.manifest.models_dir or ""),
            **runtime.params,
        }
        values.update(extra)
        return values

    # -- detection ---------------------------------------------------------------------------

    async def detect(self) -> bool:
        """Look for the executable again (in a thread: it touches the filesystem)."""
        binary = await asyncio.to_thread(
            find_executable, self.manifest.detect, self.placeholder_values()
        )
        self._apply(lifecycle.Detected(binary))
        return binary is not None

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, *, explicit: bool = True) -> EngineStatus:
        """Start (or adopt) the engine and wait until it is ready."""
        async with self._lock:
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

    async def restart(self) -> EngineStatus:
        """Stop and start again (an adopted engine is refused)."""
        async with self._lock:
            await self._command("restart")
            await self._stop_locked()
            await self._start_locked()
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
        )

    async def update(self, progress: installer.ProgressSink) -> EngineStatus:
        """Put the latest version in place of the one PAIR installed; what ran runs again
        and the desired state stays as it was. Progress as install progress."""
        async with self._lock:
            await self._command("update")
            refusal = await self._update_refusal()
            if refusal is not None:
                raise errors.Conflict(refusal, {"engine": self.name})
            report = installer.Reporter(self.name, progress)
            try:
                await self._update_locked(report)
            except BaseException as exc:
                report.fail(_failure_text(exc))
                raise
            return self.status()

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

    async def _update_locked(self, report: installer.Reporter) -> None:
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

    async def _command(self, command: Command, *, explicit: bool = False) -> None:
        self._apply(lifecycle.Commanded(command, explicit))
        desired = self._life.desired
        if explicit and desired is not None:
            await self._hooks.save_desired(self.name, desired)

    async def _start_locked(self) -> None:
        if await self._runner.answers(self.manifest.runtime, self.manifest.runtime.ready):
            log.info("%s already answers on port %d: adopting it", self.name, self.port)
            slots = await slot_counts.engine_slots(self)
            self._apply(lifecycle.Adopted(at=self._clock.monotonic(), slots=slots))
        else:
            slots = await self._start_owned()
            self._apply(lifecycle.Ready(at=self._clock.monotonic(), slots=slots))
        self._hooks.errors.clear_error(self._error_id("crashed"))
        self._hooks.errors.clear_error(self._error_id("start-failed"))
        self._spawn_monitors()

    async def _start_owned(self) -> int:
        """Launch the engine, wait until it is ready and return its slot count."""
        await self._require_installed()
        self._apply(lifecycle.StartBegan())
        try:
            await self._check_port_free()
            await self._launch()
            return await slot_counts.engine_slots(self)
        except BaseException as exc:
            await asyncio.shield(self._abandon_start(exc))
            raise

    async def _check_port_free(self) -> None:
        if await self._runner.port_in_use(self.manifest.runtime):
            raise errors.Conflict(
                f"port {self.port} is in use by another program that is not "
                f"{self.manifest.display_name}; PAIR never stops programs it did not start. "
                f"Choose another port for {self.manifest.display_name}.",
                {"engine": self.name, "port": self.port},
            )

    async def _require_installed(self) -> None:
        if not self._life.installed and not await self.detect():
            raise errors.NotFound(
                f"{self.manifest.display_name} is not installed on this computer",
                {"engine": self.name, "action": "install"},
            )

    async def _launch(self) -> None:
        values = self.placeholder_values()
        if self.manifest.runtime.mode == "process":
            await self._spawn_process(values)
        else:
            # Recorded before the commands run, so a half-started daemon is stopped too.
            self._apply(lifecycle.DaemonLaunched())
            await self._runner.run_start_commands(self.manifest, values)
        await self._runner.wait_ready(self.manifest, self._process)

    async def _spawn_process(self, values: dict[str, str]) -> None:
        assert self._life.binary is not None, "a start requires the executable"
        process = await self._runner.spawn(self.manifest, self._life.binary, values)
        self._process = process
        self._apply(lifecycle.Spawned(process.pid))
        await self._hooks.record_process(self.name, process.pid, process.create_time)

    async def _abandon_start(self, exc: BaseException) -> None:
        if self.owned:
            await self._stop_owned()
        message = str(exc) if not isinstance(exc, asyncio.CancelledError) else "start cancelled"
        self._apply(lifecycle.StartFailed(message))
        self._hooks.errors.raise_error(
            self._error_id("start-failed"),
            f"{self.manifest.display_name} could not start: {message}",
            action=ErrorAction(kind="retry", label="Try again", target=self.name),
        )

    async def _stop_locked(self) -> None:
        if self._life.adopted:
            raise errors.Conflict(
                f"{self.manifest.display_name} on port {self.port} was not started by PAIR, so "
                "PAIR will not stop it; stop it where it was started",
                {"engine": self.name, "adopted": True},
            )
        if self.owned:
            await self._stop_owned()
        else:
            self._apply(lifecycle.Stopped())

    async def _stop_owned(self) -> None:
        self._apply(lifecycle.StopBegan())
        await self._tasks.close(timeout=1.0)
        process, self._process = self._process, None
        if process is not None:
            stop = self.manifest.runtime.stop
            await process.stop(kill=stop.signal == "kill", grace=stop.grace_s)
            await self._hooks.forget_process(process.pid)
        if self._life.owner == "daemon":
            await self._runner.stop_daemon(self.manifest, self.placeholder_values())
        self._apply(lifecycle.Stopped())

    # -- observation ---------------------------------------------------------------------------

    def _spawn_monitors(self) -> None:
        run = self._life.run
        assert run is not None, "monitors watch a run that began"
        if self._process is not None:
            self._tasks.spawn(self._watch_exit(self._process, run), name="exit")
        if self.manifest.runtime.health is not None:
            self._tasks.spawn(self._watch_health(run), name="health")

    async def _watch_exit(self, process: RunningProcess, run: int) -> None:
        code = await process.wait()
        if not lifecycle.observes(self._life, run):
            return  # a stop got there first (without waiting for the lock it holds)
        reason = f"exited with code {code}"
        async with self._lock:
            exited = lifecycle.Exited(
                run, process.pid, self._with_output(reason), self._clock.monotonic()
            )
            if not self._apply(exited):
                return  # a stop or restart got there first: not a crash
            self._process = None
            await self._hooks.forget_process(process.pid)
            self._report_crash(reason)

    async def _watch_health(self, run: int) -> None:
        probe = self.manifest.runtime.health
        assert probe is not None
        failures = 0
        while lifecycle.observes(self._life, run):
            await self._clock.sleep(probe.interval_s)
            healthy = await self._runner.answers(self.manifest.runtime, probe)
            if not lifecycle.observes(self._life, run):
                return
            failures = 0 if healthy else failures + 1
            if failures >= UNHEALTHY_AFTER:
                await self._on_unhealthy(run, failures * probe.interval_s)
                return

    async def _on_unhealthy(self, run: int, silent_s: float) -> None:
        async with self._lock:
            adopted = self._life.adopted
            if not self._apply(lifecycle.Unhealthy(run)):
                return
            if adopted:
                log.warning("%s (adopted) stopped answering; it is gone", self.name)
                return
            log.error("%s stopped answering health probes for %.0f s", self.name, silent_s)
            await self._stop_owned()
            reason = f"answered no health probe for {silent_s:.0f} s"
            self._apply(lifecycle.Crashed(self._with_output(reason), self._clock.monotonic()))
            self._report_crash(reason)

    def _report_crash(self, reason: str) -> None:
        delay, run = self._life.restart_in, self._life.run
        suffix = f"; restarting in {delay:g} s" if delay is not None else ""
        self._hooks.errors.raise_error(
            self._error_id("crashed"),
            f"{self.manifest.display_name} {reason}{suffix}",
            action=ErrorAction(kind="retry", label="Start again", target=self.name),
        )
        if delay is not None and run is not None:
            self._tasks.spawn(self._restart_after(delay, run), name="crash-restart")

    async def _restart_after(self, delay: float, run: int) -> None:
        await self._clock.sleep(delay)
        async with self._lock:
            if not self._apply(lifecycle.CrashRestartDue(run)):
                return
            with contextlib.suppress(errors.RpcError):
                await self._start_locked()

    # -- helpers -------------------------------------------------------------------------------

    def _apply(self, event: Event) -> bool:
        """Move the lifecycle on; whether it changed (a stale observation changes nothing)."""
        before, self._life = self._life, lifecycle.apply(self._life, event)
        if lifecycle.reported_changed(before, self._life):
            self._notify()
        return self._life != before

    def _with_output(self, reason: str) -> str:
        tail = " | ".join(self.output.tail(3))
        return f"{reason}; last output: {tail}" if tail else reason

    def _notify(self) -> None:
        self._hooks.on_change(self.status())

    def _error_id(self, kind: str) -> str:
        return f"engine:{kind}:{self.name}"


def _failure_text(exc: BaseException) -> str:
    if isinstance(exc, errors.RpcError):
        return exc.message
    if isinstance(exc, asyncio.CancelledError):
        return "the update was cancelled"
    return str(exc) or type(exc).__name__
