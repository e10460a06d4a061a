"""``pair``'s entry point. A worker's start (``pair worker NAME ...``, how the broker runs its
workers) goes straight to ``worker_command.py`` and imports only that worker's modules; every
other command loads the whole command line (``commands.py``), whose parser leaves the broker out:
only ``pair node`` loads it."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from backend.cli import worker_command
from backend.cli.run_gui import RunGui

__all__ = ["GUARD_COMMAND", "RunGui", "build_parser", "main"]

# ``pair lifetime-guard BROKER_PID [--ignore-sigpipe] -- ARGV``: how a frozen app runs the
# watchdog that ties a child's life to the broker's on macOS (``backend/core/lifetime/``).
GUARD_COMMAND = "lifetime-guard"


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    from backend.cli.commands import build_parser as build

    return build()


def main(argv: Sequence[str] | None = None, *, run_gui: RunGui | None = None) -> int:
    """Entry point of ``pair``. ``run_gui`` runs the desktop app in this process (the frozen
    app passes it); without it ``pair`` execs ``python -m app``."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        if worker_command.is_worker_command(arguments):
            return worker_command.run(arguments[1:])
        if arguments[:1] == [GUARD_COMMAND]:  # the frozen macOS app's engine watchdog
            from backend.core.lifetime.guard import main as guard

            return guard(arguments[1:])
        from backend.cli.commands import dispatch

        return dispatch(arguments, run_gui)
    except BrokenPipeError:
        # `pair status | head` closed our stdout early; that is not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
