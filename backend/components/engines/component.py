"""The engines component: one controller per manifest, model watcher, desired-state restore."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import aiohttp

from backend.common.files import write_private_atomic
from backend.common.tasks import TaskSet, wait_first
from backend.components.engines import actions, inventory, store_actions
from backend.components.engines.controller import EngineController, EngineHooks
from backend.components.engines.digests import EngineDigests
from backend.components.engines.exclusive import OPEN_GATE, ExclusiveGate, ExclusiveKind
from backend.components.engines.launch import EngineSettings, NoSettings
from backend.components.engines.ledger import EngineLedger
from backend.components.engines.manifest import load_all
from backend.components.engines.port_override import moved_manifest
from backend.components.engines.probes import port_in_use
from backend.components.engines.process import reap_orphan
from backend.components.engines.replica_marks import ReplicaMarks
from backend.components.engines.runner import REAL_DRIVERS, EngineDrivers
from backend.components.engines.shaping import LaunchShaper
from backend.core.clock import Clock
from backend.core.component import Component
from backend.core.rpc import NumberedStream
from backend.core.supervisor import ErrorSink
from backend.protocol import errors
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import (
    EngineActionName,
    EngineActionResult,
    EngineEvent,
    EngineModels,
    EngineModelsChanged,
    EnginesSnapshot,
    EngineStateChanged,
    EngineStatus,
    InstallProgress,
    InstallProgressed,
    MemberEngines,
    ModelDetails,
    PullProgress,
    PullProgressed,
)
from backend.protocol.types.scheduler import SchedulerStates

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 5.0
INVENTORY_DEADLINE_S = 5.0
NO_MODELS = EngineModels(models=[], by_engine={}, loaded_by_engine={}, slots_by_engine={})


class EnginesComponent(Component):
    """Owns the engine controllers, their shared HTTP session, the loaded-model watcher and
    the restarts that follow changed engine settings; publishes every change as a numbered
    ``engine:event`` and keeps what a snapshot needs. Exclusive operations (restart, a running
    engine's port move, update, model load/unload/delete) first hold the bound gate."""

    ready_on_start = False

    def __init__(
        self,
        *,
        data_dir: Path,
        ledger: EngineLedger,
        errors_sink: ErrorSink,
        clock: Clock,
        events: NumberedStream[EngineEvent],
        members: Callable[[], list[MemberEngines]] = list,
        scheduler: Callable[[], SchedulerStates | None] = lambda: None,
        watch_interval: float = WATCH_INTERVAL_S,
        settings: EngineSettings | None = None,
        drivers: EngineDrivers = REAL_DRIVERS,
    ) -> None:
        super().__init__("engines")
        self._drivers = drivers
        self._members = members
        self._data_dir = data_dir
        self._settings: EngineSettings = settings if settings is not None else NoSettings()
        self._gate: ExclusiveGate = OPEN_GATE
        self._shapers: dict[str, LaunchShaper] = {}
        self._relaunches = TaskSet("engines:settings-restart")
        self._relaunch_pending: set[str] = set()
        self._scheduler = scheduler
        self.override_dir = data_dir / "engines"
        self._ledger = ledger
        self._errors = errors_sink
        self._clock = clock
        self._events = events
        self._last_models = NO_MODELS
        self._pulls: dict[tuple[str, str], PullProgress] = {}  # (engine, model): in progress
        self._installs: dict[str, InstallProgress] = {}
        self._watch_interval = watch_interval
        self.controllers: dict[str, EngineController] = {}
        self._loaded: dict[str, list[str]] = {}
        # Names and sizes come from one answer and are replaced together, never one alone.
        self._listed: dict[str, actions.ModelListing] = {}
        self._sweep: asyncio.Task[None] | None = None
        self._stop_requested = asyncio.Event()
        # Set when an engine starts running: list its models now, not at the next watch tick.
        self._recheck = asyncio.Event()
        # Weights digests follow the lists: a refresh that learns one lists and publishes again.
        self._digests = EngineDigests(data_dir / "models" / "digests.json", self._recheck.set)
        self.replica_marks = ReplicaMarks(clock, on_change=self._recheck.set)

    async def run(self) -> None:
        """Build controllers, reap orphans, restore intent, then watch models until cancelled."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session:
            self._stop_requested.clear()
            try:
                await self._build(session)
                self.announce_ready()
                await self._watch_models()
            finally:
                with contextlib.suppress(errors.RpcError):  # logged by the sweep
                    await asyncio.shield(self.prepare_shutdown())
                await asyncio.shield(self._digests.close())
                self.controllers = {}

    def binary(self, name: str) -> Path | None:
        """The executable found for engine ``name``; None when not found (or no such engine)."""
        controller = self.controllers.get(name)
        binary = controller.status().binary if controller is not None else None
        return Path(binary) if binary else None

    def bind_shaper(self, engine: str, shaper: LaunchShaper) -> None:
        """Shape every launch of ``engine`` with ``shaper`` (bound before the component runs)."""
        self._shapers[engine] = shaper

    def bind_gate(self, gate: ExclusiveGate) -> None:
        """Hold ``gate`` (the proxy's schedulers) around every exclusive operation."""
        self._gate = gate

    async def _build(self, session: aiohttp.ClientSession) -> None:
        await self._reap_orphans()
        loaded = load_all(self.override_dir)
        for name, problem in loaded.problems.items():
            self._errors.raise_error(
                f"engine:manifest:{name}",
                f"{problem}; using the bundled manifest",
                severity="warning",
            )
        desired = await self._ledger.desired()
        hooks = EngineHooks(
            errors=self._errors,
            on_change=self._on_engine_change,
            save_desired=self._ledger.save_desired,
            record_process=self._ledger.record_process,
            forget_process=self._ledger.forget_process,
        )
        self.controllers = {
            name: EngineController(
                manifest,
                session=session,
                clock=self._clock,
                hooks=hooks,
                install_dir=self.override_dir / name,
                desired=desired.get(name),
                data_dir=self._data_dir,
                settings=self._settings,
                drivers=self._drivers,
                shaper=self._shapers.get(name),
            )
            for name, manifest in loaded.manifests.items()
        }
        self._recheck.set()  # list the model stores at once, running or not
        await asyncio.gather(*(c.detect() for c in self.controllers.values()))
        await asyncio.gather(
            *(self._restore(c) for c in self.controllers.values() if c.status().desired is True)
        )

    async def _restore(self, controller: EngineController) -> None:
        try:
            await controller.start(explicit=False)
        except errors.RpcError as exc:
            log.warning("could not restore %s: %s", controller.name, exc)

    async def _reap_orphans(self) -> None:
        for pid, engine, created in await self._ledger.recorded_processes():
            if await asyncio.to_thread(reap_orphan, pid, created):
                log.warning("reaped %s (pid %d) left by a previous broker", engine, pid)
            await self._ledger.forget_process(pid)

    async def prepare_shutdown(self) -> None:
        """Stop every engine PAIR started, keeping intent; concurrent callers join one sweep, a
        later call runs a new one (so a sweep that failed is retried)."""
        if self._sweep is None or (self._sweep.done() and self.controllers):
            self._sweep = asyncio.get_running_loop().create_task(
                self._stop_owned(), name="engines:shutdown-sweep"
            )
        await asyncio.shield(self._sweep)

    async def _stop_owned(self) -> None:
        await self._relaunches.close(timeout=1.0)  # no restart for new settings after this
        controllers = list(self.controllers.values())
        results = await asyncio.gather(*(c.shutdown() for c in controllers), return_exceptions=True)
        failed = [
            f"{c.name}: {r}"
            for c, r in zip(controllers, results, strict=True)
            if isinstance(r, Exception)
        ]
        if failed:
            log.error("stopping engines failed: %s", "; ".join(failed))
            raise errors.InternalError("engines PAIR started did not stop: " + "; ".join(failed))

    def controller(self, name: str) -> EngineController:
        """The named engine, or a clear error."""
        if not self.controllers:
            raise errors.Unavailable("the engine manager is not running")
        found = self.controllers.get(name)
        if found is None:
            raise errors.NotFound(
                f"no engine named {name!r}; known engines: {', '.join(sorted(self.controllers))}"
            )
        return found

    def last_models(self) -> dict[str, tuple[list[str] | None, list[str] | None]]:
        """Each running (or being relaunched) engine's last good (routable, loaded) models,
        without asking the engines."""
        return {
            name: (self._routable(name, controller), self._loaded.get(name))
            for name, controller in self.controllers.items()
            if controller.running or controller.relaunching
        }

    def _routable(self, name: str, controller: EngineController) -> list[str] | None:
        """The models requests may name: those listed, but for an adopted engine with a model
        store only what it serves, since PAIR's store is not what that engine loads from and
        PAIR may not relaunch it on another model."""
        if controller.store is not None and controller.status().adopted:
            return self._loaded.get(name)
        return _names_of(self._listed.get(name))

    def returning_models(self) -> dict[str, list[str]]:
        """The last listed models of each engine that is down only while PAIR brings it back
        after a crash (``coming_back``): its door answers 503 for them meanwhile, not 404."""
        returning: dict[str, list[str]] = {}
        for name, controller in self.controllers.items():
            models = _names_of(self._listed.get(name))
            if controller.coming_back and models:
                returning[name] = list(models)
        return returning

    def last_slots(self) -> dict[str, dict[str, int]]:
        """Each running engine's last listed slots per loaded model, without asking it; an
        engine that stopped or crashed has none (its counts ended with it)."""
        by_engine = self._last_models.slots_by_engine
        return {
            name: dict(by_engine.get(EngineName(name), {}))
            for name, controller in self.controllers.items()
            if controller.running
        }

    def last_listing(self) -> EngineModels:
        """The watcher's last whole listing (nothing asked; empty before the first)."""
        return self._last_models

    def last_weights(
        self,
    ) -> tuple[dict[EngineName, dict[str, str]], dict[EngineName, dict[str, int]]]:
        """The last listing's weights digests and sizes, by engine and model (nothing asked)."""
        return self._last_models.digests_by_engine, self._last_models.sizes_by_engine

    async def stop(self) -> None:
        """Stop owned engines now and let ``run()`` return."""
        self._stop_requested.set()
        with contextlib.suppress(errors.RpcError):  # logged; run() sweeps once more as it ends
            await self.prepare_shutdown()

    def statuses(self) -> list[EngineStatus]:
        """Every engine's status."""
        return [controller.status() for controller in self.controllers.values()]

    async def set_port(self, name: str, port: int) -> EngineStatus:
        """Move an engine PAIR manages to ``port``, persisted as a minimal override."""
        controller = self.controller(name)
        if not 1 <= port <= 65535:
            raise errors.InvalidParams(f"Invalid params: port {port} is outside 1-65535")
        if port == controller.port:
            return controller.status()  # nothing to move: no restart
        if await port_in_use(controller.host, port):
            raise errors.Conflict(f"port {port} is already in use")
        manifest, override, path = moved_manifest(self.override_dir, name, port)
        async with self._held(controller, "restart", when=controller.running):
            status = await controller.replace_manifest(manifest)
        await asyncio.to_thread(write_private_atomic, path, json.dumps(override, indent=2).encode())
        return status

    async def restart(self, name: str) -> EngineStatus:
        """Stop and start an engine again, once the gate granted it."""
        controller = self.controller(name)
        async with self._gate.hold(controller.name, "restart"):
            return await controller.restart()

    async def update(self, name: str) -> EngineStatus:
        """Update an engine: staged first, then stopped, replaced and started inside the gate."""
        controller = self.controller(name)
        return await controller.update(
            self.on_install_progress, lambda: self._gate.hold(controller.name, "update")
        )

    async def switch_model(self, engine: str, model: str) -> int:
        """Relaunch the one-model ``engine`` on ``model`` WITHOUT the gate (the proxy's scheduler
        drained the engine itself); the choice is remembered and the model listing refreshed.
        Returns the new ``instance``. ``NotFound`` for a model not in the store; a model the
        engine cannot load leaves it failed and raises with the engine's last output."""
        controller = self.controller(engine)
        try:
            await controller.switch_model(model)
        finally:
            await asyncio.shield(self._refresh_models())
        return controller.instance

    def _held(
        self, controller: EngineController, kind: ExclusiveKind, *, when: bool
    ) -> AbstractAsyncContextManager[None]:
        """The gate for ``kind`` when ``when``, else nothing to wait for."""
        if when:
            return self._gate.hold(controller.name, kind)
        return contextlib.nullcontext()

    def snapshot(self, seq: int) -> EnginesSnapshot:
        """What a subscriber starts from at ``seq``: no engine is asked."""
        return EnginesSnapshot(
            seq=seq,
            engines=self.statuses(),
            models=self._last_models,
            pulls=list(self._pulls.values()),
            installs=list(self._installs.values()),
            members=self._members(),
            scheduler=self._scheduler(),
        )

    async def run_action(
        self,
        name: str,
        action: EngineActionName,
        model: str | None,
        *,
        url: str | None = None,
        sha256: str | None = None,
        across: list[str] | None = None,
    ) -> EngineActionResult:
        """``engine:action``; pull progress is pushed as it comes. An engine with a model store
        acts on its store; the others' load, unload and delete wait for the gate. ``across``
        (load of an engine that can spread a model): the members to spread it over."""
        controller = self.controller(name)
        try:
            if across is not None and (action != "load_model" or controller.shaper is None):
                raise errors.InvalidParams(
                    f"{controller.manifest.display_name} cannot spread a model over members; "
                    "only llama.cpp's load can",
                    {"engine": controller.name},
                )
            if controller.store is not None:
                return await store_actions.run_store_action(
                    controller,
                    action,
                    model,
                    url=url,
                    sha256=sha256,
                    across=tuple(across) if across is not None else None,
                    gate=self._gate,
                    progress=self._on_pull_progress,
                )
            if url is not None or sha256 is not None:
                raise errors.InvalidParams(
                    f"{controller.manifest.display_name} pulls models by name; "
                    "a URL and a checksum are for engines whose model files PAIR downloads",
                    {"engine": controller.name},
                )
            return await self._run_manifest_action(controller, action, model)
        finally:
            if action in actions.MODEL_ACTIONS:
                await asyncio.shield(self._refresh_models())

    async def _run_manifest_action(
        self, controller: EngineController, action: EngineActionName, model: str | None
    ) -> EngineActionResult:
        kind = actions.EXCLUSIVE_ACTIONS.get(action)
        if kind is None:
            return await actions.run_action(controller, action, model, self._on_pull_progress)
        actions.check_action(controller, action, model)  # refused before waiting at the gate
        async with self._gate.hold(controller.name, kind, model):
            return await actions.run_action(controller, action, model, self._on_pull_progress)

    async def models(self) -> EngineModels:
        """Models per running engine and of every model store, running or not; an engine that
        misses the deadline, or a sweep over its budget, fails the call."""
        budget = inventory.SWEEP_BUDGET_S
        return await inventory.within_budget(self._clock, budget, self._list_models())

    async def _list_models(self) -> EngineModels:
        candidates = [c for c in self.controllers.values() if c.running or c.store is not None]
        listed = await asyncio.gather(*(self._listing(c) for c in candidates))
        for controller, listing in zip(candidates, listed, strict=True):
            self._listed[controller.name] = listing
        running = [c for c in self.controllers.values() if c.running]
        loaded = await asyncio.gather(*(self._loaded_names(c) for c in running))
        for controller, resident in zip(running, loaded, strict=True):
            self._loaded[controller.name] = resident
        return await self._models_shape(self._shown())

    def _shown(self) -> list[EngineController]:
        """The engines ``engine:models`` lists: those running, and the model stores that hold
        a model or whose engine is installed."""
        return [c for c in self.controllers.values() if c.running or self._store_shown(c)]

    def _store_shown(self, controller: EngineController) -> bool:
        if controller.store is None:
            return False
        return controller.status().installed or bool(_names_of(self._listed.get(controller.name)))

    async def _models_shape(self, shown: list[EngineController]) -> EngineModels:
        listings = {c.name: self._listed.get(c.name, actions.ModelListing([])) for c in shown}
        by_engine = {name: listing.names for name, listing in listings.items()}
        sizes = {name: dict(listing.sizes) for name, listing in listings.items()}
        details: dict[EngineName, dict[str, ModelDetails]] = {
            name: dict(listing.details) for name, listing in listings.items() if listing.details
        }
        loaded = {c.name: self._loaded.get(c.name, []) if c.running else [] for c in shown}
        slots = {c.name: await inventory.slots_per_model(c, loaded[c.name]) for c in shown}
        union = sorted({model for names in by_engine.values() for model in names})
        self._digests.refresh_nowait([(c, by_engine[c.name]) for c in shown])
        self._last_models = EngineModels(
            models=union,
            by_engine=by_engine,
            loaded_by_engine=loaded,
            slots_by_engine=slots,
            sizes_by_engine=sizes,
            details_by_engine=details,
            digests_by_engine=self._digests.current(by_engine),
            replicas_by_engine=self.replica_marks.marks(loaded),
        )
        return self._last_models

    async def _listing(self, controller: EngineController) -> actions.ModelListing:
        if controller.store is not None:
            return await store_actions.listing(controller)
        return await actions.read_listing(controller, "list_models", INVENTORY_DEADLINE_S)

    async def _loaded_names(self, controller: EngineController) -> list[str]:
        if controller.store is not None:
            return await store_actions.loaded(controller, INVENTORY_DEADLINE_S)
        return await actions.list_names(controller, "loaded_models", INVENTORY_DEADLINE_S)

    async def _watch_models(self) -> None:
        while not self._stop_requested.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._watch_interval):
                    await wait_first(
                        self._stop_requested.wait(), self._recheck.wait(), name="engines:watch"
                    )
            if not self._stop_requested.is_set():
                forced = self._recheck.is_set()
                self._recheck.clear()
                try:
                    await self._sweep_models(force=forced)
                except errors.Unavailable as exc:
                    log.warning("%s", exc)
                self._follow_settings()

    async def _sweep_models(self, *, force: bool) -> None:
        budget = inventory.SWEEP_BUDGET_S
        await inventory.within_budget(self._clock, budget, self._check_models(force=force))

    async def _check_models(self, *, force: bool) -> None:
        running = [c for c in self.controllers.values() if c.running]
        changed = await self._store_listings_changed() or force
        for controller in running:
            changed = await self._adopted_changed(controller) or changed
            try:
                resident = await self._loaded_names(controller)
            except errors.RpcError as exc:
                log.debug("loaded models of %s unavailable: %s", controller.name, exc)
                continue
            if resident != self._loaded.get(controller.name):
                self._loaded[controller.name] = resident
                changed = True
        if changed:
            for controller in running:
                if controller.store is not None or controller.status().adopted:
                    continue  # listed above
                try:
                    self._listed[controller.name] = await self._listing(controller)
                except errors.RpcError as exc:
                    log.debug("keeping the last model list of %s: %s", controller.name, exc)
            models = await self._models_shape(self._shown())
            self._events.publish(lambda seq: EngineModelsChanged(seq=seq, models=models))

    async def _adopted_changed(self, controller: EngineController) -> bool:
        """Whether an adopted engine reports another slot count or model list: what answers
        on its port may not be the engine PAIR adopted (another one started there since)."""
        if not controller.status().adopted:
            return False
        changed = await controller.recount_slots()
        if controller.store is not None:
            return changed  # the store is listed every tick, and what it serves below
        try:
            listing = await self._listing(controller)
        except errors.RpcError as exc:
            log.debug("keeping the last model list of %s: %s", controller.name, exc)
            return changed
        if listing != self._listed.get(controller.name):
            self._listed[controller.name] = listing
            changed = True
        return changed

    async def _refresh_models(self) -> None:
        """List and publish the models now (after a model action); a failure is only logged,
        so it never hides the outcome of the action."""
        try:
            await self._sweep_models(force=True)
        except Exception:
            log.exception("listing the models after a model action failed")

    async def _store_listings_changed(self) -> bool:
        """List every model store again (files may come and go outside PAIR)."""
        changed = False
        for controller in self.controllers.values():
            if controller.store is None:
                continue
            listing = await store_actions.listing(controller)
            if listing != self._listed.get(controller.name):
                self._listed[controller.name] = listing
                changed = True
        return changed

    def _follow_settings(self) -> None:
        """Restart (through the gate) a running store engine whose slots or context setting
        no longer matches what it was launched with."""
        for controller in self.controllers.values():
            plan, name = controller.launched, controller.name
            if plan is None or name in self._relaunch_pending or controller.relaunching:
                continue
            if plan.differs(self._settings.launch(name)):
                self._relaunch_pending.add(name)
                self._relaunches.spawn(self._apply_settings(controller), name=name)

    async def _apply_settings(self, controller: EngineController) -> None:
        try:
            async with self._gate.hold(controller.name, "restart"):
                plan = controller.launched  # it may have stopped or restarted meanwhile
                if plan is not None and plan.differs(self._settings.launch(controller.name)):
                    log.info("restarting %s with its changed settings", controller.name)
                    await controller.restart()
        except errors.RpcError as exc:
            log.warning("restarting %s with its new settings failed: %s", controller.name, exc)
        finally:
            self._relaunch_pending.discard(controller.name)

    def _on_engine_change(self, status: EngineStatus) -> None:
        controller = self.controllers.get(status.engine)
        stored = controller is not None and controller.store is not None
        relaunching = controller is not None and controller.relaunching
        # A store engine that stopped serves nothing: say so now, not at the next tick.
        if status.state == "running" or (stored and status.state != "starting"):
            self._recheck.set()
        self.replica_marks.engine_changed(status.engine, status.state, relaunching=relaunching)
        self._events.publish(lambda seq: EngineStateChanged(seq=seq, status=status))

    def on_install_progress(self, progress: InstallProgress) -> None:
        """Publish install progress; the install stays in snapshots until its last step."""
        if progress.done:
            self._installs.pop(progress.engine, None)
        else:
            self._installs[progress.engine] = progress
        self._events.publish(lambda seq: InstallProgressed(seq=seq, progress=progress))

    def _on_pull_progress(self, progress: PullProgress) -> None:
        if progress.done:
            self._pulls.pop((progress.engine, progress.model), None)
        else:
            self._pulls[(progress.engine, progress.model)] = progress
        self._events.publish(lambda seq: PullProgressed(seq=seq, progress=progress))


def _names_of(listing: actions.ModelListing | None) -> list[str] | None:
    return listing.names if listing is not None else None
