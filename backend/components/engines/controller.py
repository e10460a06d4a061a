"""One engine's lifecycle: detect, adopt, start, stop, restart, port changes, crash handling.

Lifecycle operations hold the engine's lock; status reads and probes never do. Every operation
bumps a revision, and an observation (health probe, exit watcher) is applied only if the
revision it started under is still current, so a late observation cannot undo a start, stop
or port change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from backend.components.engines import install as installer
from backend.components.engines import slots as slot_counts
from backend.components.engines.commands import run_command
from backend.components.engines.detect import find_executable
from backend.components.engines.manifest import Manifest
from backend.components.engines.probes import port_in_use, probe_http
from backend.components.engines.process import EngineLog, EngineProcess
from backend.components.engines.templating import expand, expand_all, expand_path
from backend.core.clock import Clock
from backend.core.restart_policy import Restart, RestartPolicy, Streak, decide_after_exit
from backend.core.supervisor import ErrorSink
from backend.core.tasks import TaskSet
from backend.protocol import errors
from backend.protocol.types import EngineState, EngineStatus, ErrorAction, InstallProgress

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
    ) -> None:
        self.manifest = manifest
        self.install_dir = install_dir
        self.output = EngineLog()
        self._session = session
        self._clock = clock
        self._hooks = hooks
        self._desired = desired
        self._lock = asyncio.Lock()
        self._tasks = TaskSet(f"engine:{manifest.engine}")
        self._state: EngineState = "stopped"
        self._binary: Path | None = None
        self._installed = False
        self._adopted = False
        self._daemon_started = False
        self._process: EngineProcess | None = None
        self._error: str | None = None
        self._revision = 0
        self._streak = Streak()
        self._started_at = 0.0
        self._slots: int | None = None

    # -- reading ----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The engine's name (``ollama``, ``lmstudio``, ``llamacpp``)."""
        return self.manifest.engine

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
        return self._state == "running"

    @property
    def owned(self) -> bool:
        """Whether PAIR started what runs (so PAIR may stop it)."""
        return self._process is not None or self._daemon_started

    def base_url(self) -> str:
        """``http://host:port`` of the engine."""
        return f"http://{self.host}:{self.port}"

    def status(self) -> EngineStatus:
        """A snapshot; never waits for a lifecycle operation."""
        process = self._process
        return EngineStatus(
            engine=self.name,
            display_name=self.manifest.display_name,
            front_door=self.manifest.front_door,
            mode=self.manifest.runtime.mode,
            installed=self._installed,
            binary=str(self._binary) if self._binary else None,
            state=self._state,
            adopted=self._adopted,
            pid=process.pid if process is not None else None,
            port=self.port,
            default_port=self.manifest.runtime.port,
            desired=self._desired,
            revision=self._revision,
            error=self._error,
            slots=self._slots if self.running else None,
        )

    def placeholder_values(self, **extra: str) -> dict[str, str]:
        """Values for the manifest's placeholders."""
        runtime = self.manifest.runtime
        values = {
            "host": self.host,
            "port": str(self.port),
            "bin": str(self._binary or ""),
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
        self._binary = await asyncio.to_thread(
            find_executable, self.manifest.detect, self.placeholder_values()
        )
        self._installed = self._binary is not None
        if not self._installed and self._state == "stopped":
            self._set_state("not-installed")
        elif self._installed and self._state == "not-installed":
            self._set_state("stopped")
        return self._installed

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, *, explicit: bool = True) -> EngineStatus:
        """Start (or adopt) the engine and wait until it is ready."""
        async with self._lock:
            self._revision += 1
            if explicit:
                await self._set_desired(True)
            if self._state == "running":
                return self.status()
            await self._start_locked()
            return self.status()

    async def stop(self, *, explicit: bool = True) -> EngineStatus:
        """Stop an engine PAIR started; refuse (but remember the intent) for an adopted one."""
        async with self._lock:
            self._revision += 1
            if explicit:
                await self._set_desired(False)
            await self._stop_locked()
            return self.status()

    async def restart(self) -> EngineStatus:
        """Stop and start again (an adopted engine is refused)."""
        async with self._lock:
            self._revision += 1
            await self._stop_locked()
            await self._start_locked()
            return self.status()

    async def shutdown(self) -> None:
        """Stop what PAIR started, keep the desired state; never touches adopted engines."""
        async with self._lock:
            self._revision += 1
            if self.owned:
                await self._stop_owned()
        await self._tasks.close(timeout=2.0)

    async def install(self, progress: installer.ProgressSink) -> EngineStatus:
        """Install with the manifest's installer; an engine already found is left as it is."""
        async with self._lock:
            self._revision += 1
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
            self._revision += 1
            await self._stop_locked()
            await installer.uninstall(
                self.manifest,
                install_dir=self.install_dir,
                values=self.placeholder_values(),
                output=self.output,
            )
            self._binary = None
            await self.detect()
            return self.status()

    async def replace_manifest(self, manifest: Manifest) -> EngineStatus:
        """Adopt a new manifest (a port change): a running owned engine restarts on it."""
        async with self._lock:
            if self._adopted and self.running:
                raise errors.Conflict(
                    f"{self.manifest.display_name} was already running when PAIR found it; "
                    "PAIR did not start it, so it cannot move it to another port"
                )
            self._revision += 1
            was_running = self.running
            if was_running:
                await self._stop_locked()
            self.manifest = manifest
            if was_running:
                await self._start_locked()
            self._notify()
            return self.status()

    async def _start_locked(self) -> None:
        if not await self._adopt_if_serving():
            self._adopted = False
            await self._require_installed()
            self._error = None
            self._set_state("starting")
            try:
                await self._check_port_free()
                await self._launch()
            except BaseException as exc:
                await asyncio.shield(self._abandon_start(exc))
                raise
        self._streak = Streak() if self._clock.monotonic() - self._started_at > 60 else self._streak
        self._started_at = self._clock.monotonic()
        await self._refresh_slots()
        self._set_state("running")
        self._hooks.errors.clear_error(self._error_id("crashed"))
        self._hooks.errors.clear_error(self._error_id("start-failed"))
        self._spawn_monitors()

    async def _adopt_if_serving(self) -> bool:
        if not await probe_http(self._session, self.host, self.port, self.manifest.runtime.ready):
            return False
        log.info("%s already answers on port %d: adopting it", self.name, self.port)
        self._adopted = True
        self._error = None
        return True

    async def _check_port_free(self) -> None:
        if await port_in_use(self.host, self.port):
            raise errors.Conflict(
                f"port {self.port} is in use by another program that is not "
                f"{self.manifest.display_name}; PAIR never stops programs it did not start. "
                f"Choose another port for {self.manifest.display_name}.",
                {"engine": self.name, "port": self.port},
            )

    async def _require_installed(self) -> None:
        if self._binary is None and not await self.detect():
            raise errors.NotFound(
                f"{self.manifest.display_name} is not installed on this computer",
                {"engine": self.name, "action": "install"},
            )

    async def _launch(self) -> None:
        if self.manifest.runtime.mode == "process":
            await self._spawn_process()
        else:
            await self._start_daemon()
        await self._wait_ready()

    async def _spawn_process(self) -> None:
        runtime = self.manifest.runtime
        values = self.placeholder_values()
        argv = [str(self._binary), *expand_all(runtime.args, values)]
        env = {**os.environ, **{k: expand(v, values) for k, v in runtime.env.items()}}
        log.info("starting %s: %s", self.name, " ".join(argv))
        self.output.add(f"[pair] starting: {' '.join(argv)}")
        process = await EngineProcess.spawn(argv, env, self.output)
        self._process = process
        await self._hooks.record_process(self.name, process.pid, process.create_time)

    async def _start_daemon(self) -> None:
        values = self.placeholder_values()
        self._daemon_started = True
        for command in self.manifest.runtime.start:
            result = await run_command(expand_all(command, values), timeout=120, output=self.output)
            if result.code != 0:
                raise errors.InternalError(
                    f"{self.manifest.display_name} did not start: {result.describe()}"
                )

    async def _wait_ready(self) -> None:
        ready = self.manifest.runtime.ready
        deadline = self._clock.monotonic() + ready.timeout_s
        while self._clock.monotonic() < deadline:
            process = self._process
            if process is not None and process.returncode is not None:
                tail = "\n".join(self.output.tail(10))
                raise errors.InternalError(
                    f"{self.manifest.display_name} exited with code {process.returncode} "
                    f"before it was ready:\n{tail}"
                )
            if await probe_http(self._session, self.host, self.port, ready):
                return
            await self._clock.sleep(ready.interval_s)
        raise errors.InternalError(
            f"{self.manifest.display_name} was not ready within {ready.timeout_s:g} s"
        )

    async def _abandon_start(self, exc: BaseException) -> None:
        if self.owned:
            await self._stop_owned()
        message = str(exc) if not isinstance(exc, asyncio.CancelledError) else "start cancelled"
        self._error = message
        self._set_state("error")
        self._hooks.errors.raise_error(
            self._error_id("start-failed"),
            f"{self.manifest.display_name} could not start: {message}",
            action=ErrorAction(kind="retry", label="Try again", target=self.name),
        )

    async def _stop_locked(self) -> None:
        if self._adopted:
            raise errors.Conflict(
                f"{self.manifest.display_name} on port {self.port} was not started by PAIR, so "
                "PAIR will not stop it; stop it where it was started",
                {"engine": self.name, "adopted": True},
            )
        if self.owned:
            await self._stop_owned()
        self._error = None
        self._set_state("stopped" if self._installed else "not-installed")

    async def _stop_owned(self) -> None:
        self._set_state("stopping")
        await self._tasks.close(timeout=1.0)
        process, self._process = self._process, None
        if process is not None:
            stop = self.manifest.runtime.stop
            await process.stop(kill=stop.signal == "kill", grace=stop.grace_s)
            await self._hooks.forget_process(process.pid)
        if self._daemon_started:
            await self._stop_daemon()
        self._set_state("stopped")

    async def _stop_daemon(self) -> None:
        stop = self.manifest.runtime.stop
        if stop.cmd:
            await run_command(
                expand_all(stop.cmd, self.placeholder_values()),
                timeout=stop.grace_s + 10,
                output=self.output,
            )
        deadline = self._clock.monotonic() + stop.grace_s
        while await port_in_use(self.host, self.port) and self._clock.monotonic() < deadline:
            await self._clock.sleep(0.1)
        self._daemon_started = False

    # -- observation ---------------------------------------------------------------------------

    def _spawn_monitors(self) -> None:
        revision = self._revision
        if self._process is not None:
            self._tasks.spawn(self._watch_exit(self._process, revision), name="exit")
        if self.manifest.runtime.health is not None:
            self._tasks.spawn(self._watch_health(revision), name="health")

    async def _watch_exit(self, process: EngineProcess, revision: int) -> None:
        code = await process.wait()
        if revision != self._revision:
            return
        async with self._lock:
            if revision != self._revision or self._process is not process:
                return  # a stop or restart got there first: not a crash
            self._revision += 1
            self._process = None
            await self._hooks.forget_process(process.pid)
            await self._after_crash(f"exited with code {code}")

    async def _watch_health(self, revision: int) -> None:
        probe = self.manifest.runtime.health
        assert probe is not None
        failures = 0
        while revision == self._revision:
            await self._clock.sleep(probe.interval_s)
            healthy = await probe_http(self._session, self.host, self.port, probe)
            if revision != self._revision:
                return
            failures = 0 if healthy else failures + 1
            if failures >= UNHEALTHY_AFTER:
                await self._on_unhealthy(revision, failures * probe.interval_s)
                return

    async def _on_unhealthy(self, revision: int, silent_s: float) -> None:
        async with self._lock:
            if revision != self._revision:
                return
            self._revision += 1
            if self._adopted:
                self._adopted = False
                self._set_state("stopped" if self._installed else "not-installed")
                log.warning("%s (adopted) stopped answering; it is gone", self.name)
                return
            log.error("%s stopped answering health probes for %.0f s", self.name, silent_s)
            await self._stop_owned()
            await self._after_crash(f"answered no health probe for {silent_s:.0f} s")

    async def _after_crash(self, reason: str) -> None:
        tail = " | ".join(self.output.tail(3))
        self._error = f"{reason}; last output: {tail}" if tail else reason
        self._set_state("error")
        ran_for = self._clock.monotonic() - self._started_at
        self._streak, decision = decide_after_exit(RestartPolicy(), self._streak, ran_for)
        restart = decision if isinstance(decision, Restart) and self._desired is True else None
        suffix = f"; restarting in {restart.delay:g} s" if restart is not None else ""
        self._hooks.errors.raise_error(
            self._error_id("crashed"),
            f"{self.manifest.display_name} {reason}{suffix}",
            action=ErrorAction(kind="retry", label="Start again", target=self.name),
        )
        if restart is not None:
            self._tasks.spawn(
                self._restart_after(restart.delay, self._revision), name="crash-restart"
            )

    async def _restart_after(self, delay: float, revision: int) -> None:
        await self._clock.sleep(delay)
        async with self._lock:
            if revision != self._revision or self._desired is not True:
                return
            self._revision += 1
            with contextlib.suppress(errors.RpcError):
                await self._start_locked()

    # -- helpers -------------------------------------------------------------------------------

    async def _refresh_slots(self) -> None:
        self._slots = await slot_counts.engine_slots(self)

    async def _set_desired(self, desired: bool) -> None:
        self._desired = desired
        await self._hooks.save_desired(self.name, desired)

    def _set_state(self, state: EngineState) -> None:
        self._state = state
        self._notify()

    def _notify(self) -> None:
        self._hooks.on_change(self.status())

    def _error_id(self, kind: str) -> str:
        return f"engine:{kind}:{self.name}"
