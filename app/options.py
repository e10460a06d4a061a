"""Command-line options of the desktop app, and the broker flags it passes through."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from backend.protocol.endpoint import resolve_data_dir
from backend.protocol.types import LOG_LEVELS, LogLevel

PASS_THROUGH_PORTS = (
    "--node-port",
    "--ollama-port",
    "--openai-port",
    "--llamacpp-port",
    "--relay-port",
)


@dataclass(frozen=True, slots=True)
class AppOptions:
    """What the app was started with: the node's data dir and flags for a broker it spawns."""

    data_dir: Path
    broker_args: tuple[str, ...] = ()
    log_level: LogLevel | None = None


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


def parse_options(argv: Sequence[str]) -> AppOptions:
    """Parse arguments (without the program name) into options."""
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
    return AppOptions(resolve_data_dir(namespace.data_dir), tuple(broker_args), log_level)
