"""Running an engine's commands (daemon start/stop, CLI model actions) with a time limit."""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Protocol

import msgspec

from backend.components.engines.console import command_spawn_options
from backend.components.engines.process import EngineLog


class CommandResult(msgspec.Struct, frozen=True):
    """Exit status and output of one command; ``started`` is False when it could not even be
    run (no such program), so it started nothing."""

    argv: list[str]
    code: int
    lines: list[str] = msgspec.field(default_factory=list)
    started: bool = True

    def describe(self) -> str:
        """One line for an error message."""
        tail = " | ".join(self.lines[-3:])
        return f"`{' '.join(self.argv)}` exited with {self.code}" + (f": {tail}" if tail else "")


class CommandRunner(Protocol):
    """Runs one command to completion (``run_command`` in production)."""

    async def __call__(
        self, argv: list[str], *, timeout: float, output: EngineLog | None = None
    ) -> CommandResult: ...


async def run_command(
    argv: list[str],
    *,
    timeout: float,
    output: EngineLog | None = None,
    env: dict[str, str] | None = None,
) -> CommandResult:
    """Run ``argv`` to completion, with no console window on Windows; a timeout kills it (only
    it: it is our child)."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            **command_spawn_options(),
        )
    except OSError as exc:
        return CommandResult(
            argv, 127, [f"cannot run {argv[0]}: {exc.strerror or exc}"], started=False
        )
    lines: list[str] = []
    try:
        async with asyncio.timeout(timeout):
            assert process.stdout is not None
            while raw := await process.stdout.readline():
                line = raw.decode(errors="replace").rstrip()
                lines.append(line)
                if output is not None:
                    output.add(line)
            code = await process.wait()
    except (TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise
    return CommandResult(argv, code, lines)
