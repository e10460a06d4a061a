"""``pair worker NAME ARGS``: run one of the broker's worker processes (hidden from ``pair
--help``). The broker starts its workers this way (``backend.common.self_command``), and
``main.py`` sends such a command here before it loads the rest of the command line, so a worker
process imports only its own modules: none of the broker's, the client commands' or keyring."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

# The workers the broker starts as `pair worker NAME ...` (a frozen app has no `python -m`).
WORKERS = ("proxy",)
COMMAND = "worker"


def is_worker_command(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (``pair``'s arguments) starts a worker."""
    return len(argv) > 0 and argv[0] == COMMAND


def add_parser(commands: Any) -> None:
    """``worker NAME ARGS`` on ``pair``'s command line (no help: left out of ``pair --help``)."""
    _add_arguments(commands.add_parser(COMMAND))


def run(argv: Sequence[str]) -> int:
    """``pair worker NAME ARGS`` with ``argv`` the words after ``worker``."""
    parser = argparse.ArgumentParser(prog=f"pair {COMMAND}")
    _add_arguments(parser)
    arguments = parser.parse_args(argv)
    return run_worker(arguments.worker_name, arguments.worker_args)


def run_worker(name: str, argv: list[str]) -> int:
    """Run worker ``name`` with its own arguments ``argv``."""
    # Imported here: only a worker process needs the worker's modules.
    from backend.workers.proxy.__main__ import main as proxy_main

    assert name == "proxy", name
    return proxy_main(argv)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("worker_name", choices=WORKERS, metavar="NAME")
    parser.add_argument("worker_args", nargs=argparse.REMAINDER, metavar="ARGS")
