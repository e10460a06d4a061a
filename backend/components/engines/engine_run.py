"""How one engine runs: its state, and the steps that launch (or adopt), stop and watch it.

The controller's commands (``controller.py``) take these steps holding the engine's lock;
status reads and probes never do. What PAIR knows lives in one frozen ``Lifecycle`` changed
only through ``lifecycle.apply``, which also fences observations: a health probe or exit watcher
reports the revision its run began under, and a report about a run that a start, stop or port
change has since ended leaves the state as it is. An engine with a model store is launched with
one of its models (``launch.py``) and says which one it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import aiohttp
import msgspec

from backend.common.files import ensure_private_dir
from backend.common.hostport import url_host
from backend.common.tasks import TaskSet
from backend.components.engines import launch, lifecycle
from backend.components.engines import slots as slot_counts
from backend.components.engines import versions as releases
from backend.components.engines.detect import find_executable
from backend.components.engines.http import EngineEndpoint
from backend.components.engines.launch import EngineSettings, LaunchPlan, NoSettings
from backend.components.engines.lifecycle import Command, Event, Lifecycle
from backend.components.engines.manifest import Manifest
from backend.components.engines.model_store import ModelStore
from backend.components.engines.process import EngineLog, RunningProcess
from backend.components.engines.runner import (
    REAL_DRIVERS,
    DaemonNotStopped,
    EngineDrivers,
    EngineRunner,
    StartCommandFailed,
)
from backend.components.engines.shaping import LaunchExtras, LaunchShaper
from backend.components.engines.templating import expand, expand_all, expand_path
from backend.core.clock import Clock
from backend.core.supervisor import ErrorSink
from backend.protocol import errors
from backend.protocol.proxy import PARKED_PREFIX, PARKED_SUFFIX
from backend.protocol.types.base import EngineName
from backend.protocol.types.broker import ErrorAction
from backend.protocol.types.engines import EngineStatus

log = logging.getLogger(__name__)

UNHEALTHY_AFTER = 3
# An adopted engine's port is checked this often; closed this many times in a row, it is gone.
ADOPTED_PORT_CHECK_S = 1.0
ADOPTED_GONE_AFTER = 2


class EngineHooks(msgspec.Struct, frozen=True):
    """What a controller reports to and persists through."""

    errors: ErrorSink
    on_change: Callable[[EngineStatus], None]
    save_desired: Callable[[str, bool], Awaitable[None]]
    record_process: Callable[[str, int, float], Awaitable[None]]
    forget_process: Callable[[int], Awaitable[None]]


class EngineRun:
    """One engine's state and the steps its commands take; owns the engine's process (or
    daemon), its monitor tasks and its output ring."""

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
        data_dir: Path | None = None,
        settings: EngineSettings | None = None,
        shaper: LaunchShaper | None = None,
    ) -> None:
        self.manifest = manifest
        self.install_dir = install_dir
        # The component's layout, <data_dir>/engines/<engine>, when no data dir is given.
        self.data_dir = data_dir if data_dir is not None else install_dir.parent.parent
        self.slot_dir = self.data_dir / "engines" / "slots" / manifest.engine
        self.store = self._model_store()
        self._settings: EngineSettings = settings if settings is not None else NoSettings()
        self._plan: LaunchPlan | None = None  # the last launch of a store engine
        self._shaper = shaper
        # The members the user asked to spread the model over (None: only when it must be).
        self._across: tuple[str, ...] | None = None
        self._extras = LaunchExtras()
        self._relaunching = False
        self._crash_restarting = False  # a restart after a crash is under way
        # The key an engine that takes one is launched with: random, known only to PAIR, one
        # for this broker's run (so a request sent across a relaunch is not refused).
        self._key = secrets.token_urlsafe(32) if manifest.runtime.api_key_env else None
        self._updating = asyncio.Lock()  # one update at a time; staging runs outside the lock
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
    def shaper(self) -> LaunchShaper | None:
        """What shapes this engine's launches (llama.cpp: GPU offload and spreading)."""
        return self._shaper

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

    @property
    def current_model(self) -> str | None:
        """The store model the running engine PAIR launched serves; None for an engine without
        a store, one that is not running, or one PAIR did not start."""
        plan = self.launched
        return plan.model if plan is not None else None

    @property
    def launched(self) -> LaunchPlan | None:
        """How the running store engine PAIR started was launched."""
        if self._plan is None or not self.running or self._life.owner != "process":
            return None
        return self._plan

    @property
    def api_key(self) -> str | None:
        """The key the running engine requires: PAIR launched it with one (None otherwise,
        an adopted engine included)."""
        return self._key if self._life.owner == "process" else None

    @property
    def relaunching(self) -> bool:
        """Whether PAIR is restarting the engine, switching its model or updating it: from the
        moment it stops until it runs again or the start failed."""
        return self._relaunching

    @property
    def coming_back(self) -> bool:
        """Whether the engine is down only for the moment: it is wanted, and PAIR's restart
        after its crash is due or under way (a deliberate stop, or a crash PAIR gave up
        restarting after, is not)."""
        life = self._life
        if life.running or life.desired is not True:
            return False
        return life.restart_in is not None or self._crash_restarting

    @property
    def instance(self) -> int:
        """Changes with every launch: the running process's pid, 0 when none runs."""
        return (self._life.pid or 0) if self.running else 0

    def base_url(self) -> str:
        """``http://host:port`` of the engine."""
        return f"http://{url_host(self.host)}:{self.port}"

    def endpoint(self) -> EngineEndpoint:
        """Where the engine answers HTTP now (its port may change between calls)."""
        display_name = self.manifest.display_name
        key = self.api_key
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        return EngineEndpoint(
            self.name, display_name, self.base_url(), self.port, self._session, headers
        )

    def slot_source(self) -> slot_counts.SlotSource:
        """What counting the engine's slots reads now."""
        spec, runtime = self.manifest.slots, self.manifest.runtime
        owned = self.owned
        counts_args = owned and spec.source == "args"
        argv = expand_all(runtime.args, self.placeholder_values()) if counts_args else None
        return slot_counts.SlotSource(spec, runtime.env if owned else None, argv, self.endpoint())

    def status(self) -> EngineStatus:
        """A snapshot; never waits for a lifecycle operation."""
        from backend.components.engines.backend_label import backend_label  # cached per binary

        status = lifecycle.status_of(self.manifest, self._life, backend_label(self._life.binary))
        if self._shaper is not None:
            status = msgspec.structs.replace(status, spread=self._shaper.spread())
        return status

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
            "data_dir": str(self.data_dir),
            "slot_dir": str(self.slot_dir),
            **runtime.params,
        }
        if self.store is not None:
            values.update({"model": "", "model_path": ""})
            if self._plan is not None:
                values.update(self._plan.values())
        values.update(extra)
        return values

    def _model_store(self) -> ModelStore | None:
        spec = self.manifest.model_store
        if spec is None:
            return None
        return ModelStore(Path(expand_path(expand(spec.dir, {"data_dir": str(self.data_dir)}))))

    # -- detection ---------------------------------------------------------------------------

    async def detect(self) -> bool:
        """Look for the executable again (in a thread: it touches the filesystem)."""
        binary = await asyncio.to_thread(
            find_executable, self.manifest.detect, self.placeholder_values()
        )
        self._apply(lifecycle.Detected(binary))
        return binary is not None

    def _require_store(self) -> ModelStore:
        if self.store is None:
            raise errors.InvalidParams(
                f"{self.manifest.display_name} keeps no models of its own for PAIR to load",
                {"engine": self.name},
            )
        return self.store

    @contextlib.contextmanager
    def _relaunch(self, relaunching: bool) -> Iterator[None]:
        """``relaunching`` (when the engine ran) until the block ends, started or failed."""
        self._relaunching = relaunching
        try:
            yield
        finally:
            self._relaunching = False

    # -- steps, taken under the engine's lock ---------------------------------------------------

    async def _command(self, command: Command, *, explicit: bool = False) -> None:
        self._apply(lifecycle.Commanded(command, explicit))
        desired = self._life.desired
        if explicit and desired is not None:
            await self._hooks.save_desired(self.name, desired)

    async def _start_locked(self, model: str | None = None) -> None:
        """Adopt what answers on the port, else launch (a store engine with ``model``, None:
        the remembered one)."""
        if await self._runner.answers(self.manifest.runtime, self.manifest.runtime.ready):
            log.info("%s already answers on port %d: adopting it", self.name, self.port)
            slots = await slot_counts.engine_slots(self.slot_source())
            self._apply(lifecycle.Adopted(at=self._clock.monotonic(), slots=slots))
        else:
            slots = await self._start_owned(model)
            self._apply(lifecycle.Ready(at=self._clock.monotonic(), slots=slots))
        self._hooks.errors.clear_error(self._error_id("crashed"))
        self._hooks.errors.clear_error(self._error_id("start-failed"))
        self._spawn_monitors()

    async def _start_owned(self, model: str | None) -> int:
        """Launch the engine, wait until it is ready and return its slot count."""
        await self._require_installed()
        self._apply(lifecycle.StartBegan())
        try:
            await self._check_port_free()
            await self._launch(model)
            return await slot_counts.engine_slots(self.slot_source())
        except BaseException as exc:
            await asyncio.shield(self._abandon_start(exc))
            raise

    async def _check_port_free(self) -> None:
        if await self._runner.port_in_use(self.manifest.runtime):
            raise errors.Conflict(
                f"port {self.port} is in use by another program that is not "
                f"{self.manifest.display_name}; PAIR never stops programs it did not start. "
                f"Choose another port for {self.manifest.display_name}: its card's Port field "
                f"on the Engines page, or `pair engine set-port {self.name} PORT`.",
                {"engine": self.name, "port": self.port},
            )

    async def _require_installed(self) -> None:
        if not self._life.installed and not await self.detect():
            raise self._not_installed()

    async def _require_startable(self) -> None:
        """Refuse a start that cannot happen before it is recorded as wanted: a refused start
        must not leave the engine to be started by surprise once it is installed later."""
        if self.running or self._life.installed or await self.detect():
            return
        if not await self._runner.answers(self.manifest.runtime, self.manifest.runtime.ready):
            raise self._not_installed()

    def _not_installed(self) -> errors.NotFound:
        return errors.NotFound(
            f"{self.manifest.display_name} is not installed on this computer",
            {"engine": self.name, "action": "install"},
        )

    async def _launch(self, model: str | None) -> None:
        await self._plan_launch(model)
        self._extras = LaunchExtras()
        if self._shaper is not None and self._plan is not None:
            self._extras = await self._shaper.shape(self._plan.model, self._plan.path, self._across)
        values = self.placeholder_values()
        if self.manifest.runtime.mode == "process":
            await self._spawn_process(values)
        else:
            # Recorded before the commands run, so a half-started daemon is stopped too (a
            # start cancelled mid-way included); a command that never ran started nothing.
            self._apply(lifecycle.DaemonLaunched())
            try:
                await self._runner.run_start_commands(self.manifest, values)
            except StartCommandFailed as exc:
                if not exc.ran:
                    self._apply(lifecycle.NothingLaunched())
                raise
        await self._runner.wait_ready(self.manifest, self._process)

    async def _plan_launch(self, model: str | None) -> None:
        """Choose a store engine's model and settings; make the slot dir its args name."""
        if self.store is not None:
            self._plan = None
            self._plan = await launch.plan(
                self.store,
                self._settings.launch(self.name),
                model,
                engine=self.name,
                display_name=self.manifest.display_name,
            )
        if any("{slot_dir}" in arg for arg in self.manifest.runtime.args):
            # 0700: saved slots hold what clients sent.
            await asyncio.to_thread(ensure_private_dir, self.slot_dir)
            # Conversations parked by the last run belong to slots that are gone.
            await asyncio.to_thread(clear_parked, self.slot_dir)

    async def _spawn_process(self, values: dict[str, str]) -> None:
        assert self._life.binary is not None, "a start requires the executable"
        name = self.manifest.runtime.api_key_env
        keyed = {name: self._key} if name is not None and self._key is not None else None
        process = await self._runner.spawn(
            self.manifest, self._life.binary, values, keyed, extras=self._extras
        )
        self._process = process
        self._apply(lifecycle.Spawned(process.pid))
        await self._hooks.record_process(self.name, process.pid, process.create_time)

    async def _abandon_start(self, exc: BaseException) -> None:
        message = str(exc) if not isinstance(exc, asyncio.CancelledError) else "start cancelled"
        if self.owned:
            try:
                await self._stop_owned()
            except errors.RpcError as stop_failure:
                message = f"{message}; stopping what it started failed too: {stop_failure}"
        await self._release(crashed=False)
        self._apply(lifecycle.StartFailed(message))
        self._hooks.errors.raise_error(
            self._error_id("start-failed"),
            f"{self.manifest.display_name} could not start: {message}",
            action=ErrorAction(kind="retry", label="Try again", target=self.name),
        )

    async def _stop_locked(self, *, kill: bool = False) -> None:
        if self._life.adopted:
            raise errors.Conflict(
                f"{self.manifest.display_name} on port {self.port} was not started by PAIR, so "
                "PAIR will not stop it; stop it where it was started",
                {"engine": self.name, "adopted": True},
            )
        if self.owned:
            await self._stop_owned(kill=kill)
        else:
            self._apply(lifecycle.Stopped())

    async def _stop_owned(self, *, resume: bool = True, kill: bool = False) -> None:
        """Stop what PAIR started. A daemon whose port still answers afterwards raises; one
        that was serving (and ``resume``) runs on in a new run, watched again."""
        serving = resume and self.running and self._life.run is not None
        self._apply(lifecycle.StopBegan())
        await self._tasks.close(timeout=1.0)
        process, self._process = self._process, None
        if process is not None:
            stop = self.manifest.runtime.stop
            await process.stop(kill=kill or stop.signal == "kill", grace=stop.grace_s)
            await self._hooks.forget_process(process.pid)
            await self._release(crashed=False)
        if self._life.owner == "daemon":
            try:
                await self._runner.stop_daemon(self.manifest, self.placeholder_values())
            except DaemonNotStopped as exc:
                if not serving:
                    raise
                self._apply(lifecycle.StopFailed())
                self._spawn_monitors()
                raise errors.InternalError(
                    f"{exc.message}; it keeps running and PAIR watches it again",
                    {"engine": self.name, "state": "running"},
                ) from None
        self._apply(lifecycle.Stopped())

    # -- observation ---------------------------------------------------------------------------

    def _spawn_monitors(self) -> None:
        run = self._life.run
        assert run is not None, "monitors watch a run that began"
        if self._process is not None:
            self._tasks.spawn(self._watch_exit(self._process, run), name="exit")
        if self.manifest.runtime.health is not None:
            self._tasks.spawn(self._watch_health(run), name="health")
        if self._life.adopted:
            self._tasks.spawn(self._watch_port(run), name="port")

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
            await self._release(crashed=True)
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

    async def _watch_port(self, run: int) -> None:
        """An adopted engine stopped outside PAIR closes its port: let go of it within a few
        seconds instead of after health probes (and model lists) failed for a while."""
        closed = 0
        while lifecycle.observes(self._life, run):
            await self._clock.sleep(ADOPTED_PORT_CHECK_S)
            listening = await self._runner.port_in_use(self.manifest.runtime)
            closed = 0 if listening else closed + 1
            if closed >= ADOPTED_GONE_AFTER:
                await self._on_unhealthy(run, closed * ADOPTED_PORT_CHECK_S)
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
            reason = f"answered no health probe for {silent_s:.0f} s"
            try:
                await self._stop_owned(resume=False)
            except errors.RpcError as exc:
                reason = f"{reason}; stopping it failed: {exc}"
                self._apply(lifecycle.Stopped())
            self._apply(lifecycle.Crashed(self._with_output(reason), self._clock.monotonic()))
            self._report_crash(reason)

    async def recount_slots(self) -> bool:
        """Read an adopted engine's slot count again (what answers on its port may be another
        engine by now); whether it changed. A failed read keeps the last count."""
        run = self._life.run
        if not (self.running and self._life.adopted) or run is None:
            return False
        before = self._life.slots
        try:
            slots = await slot_counts.engine_slots(self.slot_source())
        except errors.RpcError as exc:
            log.debug("keeping the slot count of %s: %s", self.name, exc)
            return False
        if not self._apply(lifecycle.SlotsCounted(run, slots)):
            return False
        log.info("%s (adopted) runs %d slots now (it ran %s)", self.name, slots, before)
        return True

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
            self._crash_restarting = True
            try:
                with contextlib.suppress(errors.RpcError):
                    await self._start_locked()
            finally:
                self._crash_restarting = False

    # -- helpers -------------------------------------------------------------------------------

    async def _release(self, *, crashed: bool) -> None:
        if self._shaper is not None:
            await self._shaper.released(crashed=crashed)

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


def clear_parked(slot_dir: Path) -> None:
    """Remove the conversations the proxy's scheduler parked in ``slot_dir`` (docs/SCHEDULER.md)."""
    for path in slot_dir.glob(f"{PARKED_PREFIX}*{PARKED_SUFFIX}"):
        with contextlib.suppress(OSError):
            path.unlink()
