"""The creation flags PAIR starts children with on Windows, accepted by a real start on asyncio's
proactor loop: the console programs' (``backend/components/engines/console.py``, no console
window) through ``run_command`` and directly, and the lifetime's (own process group, no console
window) that engines and workers get. Which flags go where is tested on any OS in
``tests/unit/engines/test_command_spawn.py`` and ``tests/unit/core/lifetime/test_windows.py``."""

from __future__ import annotations

import asyncio
import sys

import pytest

from backend.components.engines.commands import run_command
from backend.components.engines.console import CREATE_NO_WINDOW, command_spawn_options
from backend.core.lifetime import SpawnOptions, child_lifetime
from tests.platform.support import only_on

pytestmark = [only_on("win32", "process creation flags"), pytest.mark.timeout(60)]

PRINT_ONE = [sys.executable, "-c", "print(1)"]


def spawn_options(kind: str) -> SpawnOptions:
    """This OS's options for a console program, or for a child tied to the broker."""
    return (
        command_spawn_options() if kind == "console-program" else child_lifetime().spawn_options()
    )


@pytest.mark.parametrize("kind", ["console-program", "lifetime"])
async def test_a_child_started_with_the_flags_runs_and_is_heard(kind: str) -> None:
    options = spawn_options(kind)
    assert options["creationflags"] & CREATE_NO_WINDOW
    process = await asyncio.create_subprocess_exec(
        *PRINT_ONE, stdout=asyncio.subprocess.PIPE, **options
    )
    output, _ = await asyncio.wait_for(process.communicate(), 30)

    assert process.returncode == 0
    assert output.strip() == b"1"


async def test_run_command_runs_a_console_program_to_its_end() -> None:
    result = await run_command(PRINT_ONE, timeout=30)

    assert (result.code, result.lines, result.started) == (0, ["1"], True)
