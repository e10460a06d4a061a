"""The proxy worker: ``pair worker proxy --fd ollama=5 --fd openai=6 --fd llamacpp=7 --relay-fd 8
--handover-fd 9 --custody-fd 10 --jobs-journal DIR`` (the hidden ``worker`` command, so a frozen
app can start it; ``python -m backend.workers.proxy`` takes the same arguments). The hand-over
channel brings a door's new socket when its port is changed at run time; the custody channel
keeps waiting requests with the broker (``custody.py``); job ends are journaled in DIR
(``channels/journal.py``). Where descriptors cannot be inherited (Windows), ``--shared NAME``
(a door or ``relay``, repeated) names each listener the broker shares over RPC once it knows
our PID (``channels/shared.py``) instead of ``--fd``, ``--relay-fd`` and ``--handover-fd``."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path

from backend.common.fd_limit import raise_open_file_limit
from backend.core.clock import SystemClock
from backend.protocol.proxy import DOORS, SHARED_RELAY, Door, SharedListenerName
from backend.protocol.worker_methods import (
    PROXY_ADOPT_DOOR,
    PROXY_CLOSE_LISTENERS,
    PROXY_EXCLUSIVE,
    PROXY_EXCLUSIVE_END,
    PROXY_IDENTITY,
    PROXY_SCHEDULER_GET,
    PROXY_TAKE_LISTENER,
    PROXY_TARGETS,
)
from backend.workers import collector, cpu_policy, event_loop
from backend.workers.proxy.channels.shared import FromShare, system_fromshare
from backend.workers.proxy.service import ProxyService
from backend.workers.runtime import Handler, environment_level, serve_worker

# Where the worker writes its cProfile stats when it exits (unset: not profiled).
PROFILE_ENV = "PAIR_PROXY_PROFILE"


def parse_fds(values: list[str]) -> dict[Door, int]:
    """``door=fd`` pairs; raises ``ValueError`` on an unknown door or a bad descriptor."""
    fds: dict[Door, int] = {}
    for value in values:
        door, _, fd = value.partition("=")
        if door not in DOORS or not fd.isdigit():
            raise ValueError(f"expected DOOR=FD with DOOR in {', '.join(DOORS)}, got {value!r}")
        fds[door] = int(fd)
    return fds


def parse_shared(values: list[str]) -> list[SharedListenerName]:
    """Listener names (a door or ``relay``); raises ``ValueError`` on another name."""
    names: list[SharedListenerName] = []
    for value in values:
        if value == SHARED_RELAY:
            names.append(SHARED_RELAY)
        elif value in DOORS:
            names.append(next(door for door in DOORS if door == value))
        else:
            raise ValueError(f"expected a door ({', '.join(DOORS)}) or relay, got {value!r}")
    return names


async def serve(
    fds: dict[Door, int],
    relay_fd: int | None = None,
    handover_fd: int | None = None,
    custody_fd: int | None = None,
    journal_dir: Path | None = None,
    *,
    shared: list[SharedListenerName] | None = None,
    fromshare: FromShare = system_fromshare,
) -> None:
    """Serve the doors, the relay and the broker's RPC until the broker closes our stdin."""
    service = ProxyService(
        fds,
        clock=SystemClock(),
        rng=random.Random(),
        relay_fd=relay_fd,
        handover_fd=handover_fd,
        custody_fd=custody_fd,
        journal_dir=journal_dir,
        shared=shared or (),
        fromshare=fromshare,
    )
    notifications = {
        PROXY_IDENTITY.name: service.on_identity,
        PROXY_TARGETS.name: service.on_targets,
        PROXY_CLOSE_LISTENERS.name: service.on_close_listeners,
        PROXY_EXCLUSIVE_END.name: service.on_exclusive_end,
    }
    handlers: dict[str, Handler] = {
        PROXY_EXCLUSIVE.name: service.exclusive,
        PROXY_SCHEDULER_GET.name: service.scheduler_get,
        PROXY_ADOPT_DOOR.name: service.listeners.adopt_door,
        PROXY_TAKE_LISTENER.name: service.listeners.take_listener,
    }
    collector.settle()  # start-up's objects frozen; the young generation walked rarely
    async with asyncio.TaskGroup() as group:
        doors = group.create_task(service.serve(), name="proxy:doors")
        sweeper = group.create_task(collector.sweep(), name="proxy:collector")
        await serve_worker(
            "proxy", handlers, environment_level(), notifications, on_peer=service.bind_broker
        )
        sweeper.cancel()
        doors.cancel()


def main(argv: list[str], *, fromshare: FromShare = system_fromshare) -> int:
    """Process entry point; ``fromshare`` rebuilds a shared listener (``socket.fromshare``)."""
    parser = argparse.ArgumentParser(prog="pair worker proxy")
    parser.add_argument("--fd", action="append", default=[], metavar="DOOR=FD")
    parser.add_argument("--shared", action="append", default=[], metavar="NAME")
    parser.add_argument("--relay-fd", type=int, default=None, metavar="FD")
    parser.add_argument("--handover-fd", type=int, default=None, metavar="FD")
    parser.add_argument("--custody-fd", type=int, default=None, metavar="FD")
    parser.add_argument("--jobs-journal", type=Path, default=None, metavar="DIR")
    arguments = parser.parse_args(argv)
    try:
        fds = parse_fds(arguments.fd)
        shared = parse_shared(arguments.shared)
    except ValueError as exc:
        parser.error(str(exc))

    cpu_policy.apply()  # before the loop starts its threads: they inherit the policy
    raise_open_file_limit()  # every client and upstream connection is a descriptor

    def run() -> None:
        event_loop.run(
            serve(
                fds,
                arguments.relay_fd,
                arguments.handover_fd,
                arguments.custody_fd,
                arguments.jobs_journal,
                shared=shared,
                fromshare=fromshare,
            )
        )

    try:
        profiled(run, os.environ.get(PROFILE_ENV))
    except KeyboardInterrupt:
        return 130
    return 0


def profiled(run: Callable[[], None], out: str | None) -> None:
    """``run()``, under cProfile when ``out`` names a file for its stats (a developer's tool:
    ``PAIR_PROXY_PROFILE=/tmp/proxy.prof``, then ``python -m pstats``)."""
    if not out:
        run()
        return
    import cProfile  # here: a worker that is not profiled never loads the profiler

    profiler = cProfile.Profile()
    try:
        profiler.runcall(run)
    finally:
        profiler.dump_stats(out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
