"""Command-line options of the desktop app, and the broker flags it passes through.

``PAIR_QUIT_WHEN_READY=1`` in the environment makes the app quit by itself once its window is
drawn and it is connected to a broker (``app/quit_when_ready.py``; the frozen app's smoke test).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec

from backend.protocol.endpoint import resolve_data_dir
from backend.protocol.types.broker import LOG_LEVELS, LogLevel

ENV_QUIT_WHEN_READY = "PAIR_QUIT_WHEN_READY"
PASS_THROUGH_PORTS = (
    "--node-port",
    "--ollama-port",
    "--openai-port",
    "--llamacpp-port",
    "--relay-port",
)


class AppOptions(msgspec.Struct, frozen=True):
    """What the app was started with: the node's data dir and flags for a broker it spawns."""

    data_dir: Path
    broker_args: tuple[str, ...] = ()
    log_level: LogLevel | None = None
    quit_when_ready: bool = False


def build_parser() -> argparse.ArgumentParser:
    """The parser for ``python -m app`` (also reached through ``pair`` when a display exists)."""
    parser = argparse.ArgumentParser(
        prog="pair", description="PAIR, the Personal AI Router (desktop app)"
    )
    parser.add_argument("--data-dir", metavar="DIR", help="the node's data directory")
    for flag in PASS_THROUGH_PORTS:
        parser.add_argument(flag, type=int, metavar="PORT", help="passed to the broker")
    parser.add_argument("--log-level", choices=LOG_LEVELS, help="passed to the broker")
    parser.add_argument("--json-logs", action="store_true", help="passed to the broker")
    return parser


def parse_options(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> AppOptions:
    """Parse arguments (without the program name) and ``environ`` into options."""
    namespace = build_parser().parse_args(list(argv))
    broker_args: list[str] = []
    for flag in PASS_THROUGH_PORTS:
        value = getattr(namespace, flag.removeprefix("--").replace("-", "_"))
        if value is not None:
            broker_args += [flag, str(value)]
    log_level: LogLevel | None = namespace.log_level
    if log_level is not None:
        broker_args += ["--log-level", log_level]
    if namespace.json_logs:
        broker_args.append("--json-logs")
    return AppOptions(
        resolve_data_dir(namespace.data_dir),
        tuple(broker_args),
        log_level,
        quit_when_ready=environ.get(ENV_QUIT_WHEN_READY) == "1",
    )
