"""The I/O of running one engine: probing its port, spawning it, driving its daemon commands.

Everything that touches the network or starts a program goes through ``EngineDrivers``, so a
controller can be tested with fakes and no subprocesses.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

import aiohttp
import msgspec

from backend.components.engines.commands import CommandRunner, run_command
from backend.components.engines.manifest import Manifest, Probe, Runtime
from backend.components.engines.probes import HttpProbe, PortCheck, port_in_use, probe_http
from backend.components.engines.process import EngineLog, EngineProcess, RunningProcess, Spawn
from backend.components.engines.shaping import LaunchExtras
from backend.components.engines.templating import expand, expand_all
from backend.core.clock import Clock
from backend.protocol import errors

log = logging.getLogger(__name__)

START_COMMAND_TIMEOUT_S = 120.0
# How long a stop command that failed is given for the endpoint to close after all.
FAILED_STOP_CONFIRM_S = 1.0


class StartCommandFailed(errors.InternalError):
    """A daemon's start command failed; ``ran`` is False when no start command could even be
    run, so nothing was started and there is nothing of PAIR's to stop."""

    def __init__(self, message: str, *, ran: bool) -> None:
        super().__init__(message)
        self.ran = ran


class DaemonNotStopped(errors.InternalError):
    """The daemon's endpoint still answers after its stop command."""


class EngineDrivers(msgspec.Struct, frozen=True):
    """How a controller touches the outside world; unit tests pass fakes."""

    probe_http: HttpProbe = probe_http
    port_in_use: PortCheck = port_in_use
    spawn: Spawn = EngineProcess.spawn
    run_command: CommandRunner = run_command


REAL_DRIVERS = EngineDrivers()
NO_EXTRAS = LaunchExtras()


class EngineRunner:
    """Probes, launches and stops one engine through its drivers; keeps no state of its own."""

    def __init__(
        self,
        drivers: EngineDrivers,
        *,
        session: aiohttp.ClientSession,
        clock: Clock,
        output: EngineLog,
    ) -> None:
        self._drivers = drivers
        self._session = session
        self._clock = clock
        self._output = output

    async def answers(self, runtime: Runtime, probe: Probe) -> bool:
        """Whether the engine's port answers ``probe`` now."""
        return await self._drivers.probe_http(self._session, runtime.bind, runtime.port, probe)

    async def port_in_use(self, runtime: Runtime) -> bool:
        """Whether anything listens on the engine's port."""
        return await self._drivers.port_in_use(runtime.bind, runtime.port)

    async def spawn(
        self,
        manifest: Manifest,
        binary: Path,
        values: Mapping[str, str],
        secrets: Mapping[str, str] | None = None,
        *,
        extras: LaunchExtras = NO_EXTRAS,
    ) -> RunningProcess:
        """Start ``binary`` with the manifest's arguments and environment, plus ``secrets``
        (variables never logged: an environment is not shown by ``ps`` as arguments are)."""
        runtime = manifest.runtime
        argv = [str(binary), *expand_all(runtime.args, values), *extras.args]
        env = {**os.environ, **{k: expand(v, values) for k, v in runtime.env.items()}}
        env.update(extras.env)
        env.update(secrets or {})
        log.info("starting %s: %s", manifest.engine, " ".join(argv))
        self._output.add(f"[pair] starting: {' '.join(argv)}")
        return await self._drivers.spawn(argv, env, self._output)

    async def run_start_commands(self, manifest: Manifest, values: Mapping[str, str]) -> None:
        """Run the daemon's start commands in order; the first that fails raises
        ``StartCommandFailed``."""
        for index, command in enumerate(manifest.runtime.start):
            result = await self._drivers.run_command(
                expand_all(command, values), timeout=START_COMMAND_TIMEOUT_S, output=self._output
            )
            if result.code != 0:
                raise StartCommandFailed(
                    f"{manifest.display_name} did not start: {result.describe()}",
                    ran=index > 0 or result.started,
                )

    async def wait_ready(self, manifest: Manifest, process: RunningProcess | None) -> None:
        """Probe until the engine is ready; raise if ``process`` exits or time runs out."""
        ready = manifest.runtime.ready
        deadline = self._clock.monotonic() + ready.timeout_s
        while self._clock.monotonic() < deadline:
            if process is not None and process.returncode is not None:
                tail = "\n".join(self._output.tail(10))
                raise errors.InternalError(
                    f"{manifest.display_name} exited with code {process.returncode} "
                    f"before it was ready:\n{tail}"
                )
            if await self.answers(manifest.runtime, ready):
                return
            await self._clock.sleep(ready.interval_s)
        raise errors.InternalError(
            f"{manifest.display_name} was not ready within {ready.timeout_s:g} s"
        )

    async def stop_daemon(self, manifest: Manifest, values: Mapping[str, str]) -> None:
        """Run the stop command and return once the daemon's port has closed: within
        ``grace_s`` after a stop command that succeeded, at once after one that failed (its
        exit code counts). ``DaemonNotStopped`` when the port still answers."""
        stop = manifest.runtime.stop
        result = None
        if stop.cmd:
            result = await self._drivers.run_command(
                expand_all(stop.cmd, values), timeout=stop.grace_s + 10, output=self._output
            )
        failed = result is not None and result.code != 0
        wait = FAILED_STOP_CONFIRM_S if failed else stop.grace_s
        if await self._closed_within(manifest.runtime, wait):
            if failed and result is not None:
                log.warning("%s stopped although %s", manifest.engine, result.describe())
            return
        why = result.describe() if failed and result is not None else "its stop command ran"
        raise DaemonNotStopped(
            f"{manifest.display_name} did not stop: {why}, and port "
            f"{manifest.runtime.port} still answers after {wait:g} s"
        )

    async def _closed_within(self, runtime: Runtime, seconds: float) -> bool:
        deadline = self._clock.monotonic() + seconds
        while await self.port_in_use(runtime):
            if self._clock.monotonic() >= deadline:
                return False
            await self._clock.sleep(0.1)
        return True
