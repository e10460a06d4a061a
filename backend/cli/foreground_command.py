"""``pair node`` (and ``pair`` alone without a display): run the broker in the foreground. The
only command that loads the broker, so ``commands.py`` imports this module when it runs."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from backend.broker import Broker
from backend.cli import exit_codes
from backend.cli.dev_only import devtools_present
from backend.components.identity.certificate import IdentityError, vault_from
from backend.core import logs
from backend.core.instance import AlreadyRunning
from backend.core.store import StoreError
from backend.protocol.endpoint import log_dir, resolve_data_dir
from backend.protocol.types.broker import Ports
from backend.wiring import BrokerConfig, WorkerSpec


def run(args: argparse.Namespace) -> int:
    """Run the broker until it is stopped; the exit code says how it ended."""
    data_dir = resolve_data_dir(args.data_dir)
    try:
        extra_workers = dev_workers(args.test_worker)
    except ValueError as exc:
        print(f"pair node: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    try:
        log_file = logs.configure(
            "broker",
            level=args.log_level or "info",
            log_dir=log_dir(data_dir),
            json_logs=args.json_logs,
        )
    except OSError as exc:
        print(f"pair node: cannot write logs: {exc}", file=sys.stderr)
        return exit_codes.ERROR
    broker = Broker(
        _config(args, data_dir, log_file),
        extra_workers=extra_workers,
        vault=vault_from(os.environ),
    )
    return _serve(broker, announce=None if args.stdio else _print_to_stdout)


def _config(args: argparse.Namespace, data_dir: Path, log_file: Path | None) -> BrokerConfig:
    ports = Ports(
        node=args.node_port,
        ollama=args.ollama_port,
        openai=args.openai_port,
        llamacpp=args.llamacpp_port,
        relay=args.relay_port,
    )
    return BrokerConfig(
        data_dir=data_dir,
        ports=ports,
        stdio=args.stdio,
        log_level=args.log_level,
        log_file=log_file,
    )


def _serve(broker: Broker, announce: Callable[[str], None] | None) -> int:
    try:
        return asyncio.run(broker.run(announce))
    except AlreadyRunning as exc:
        print(f"pair node: {exc}", file=sys.stderr)
        return exit_codes.ALREADY_RUNNING
    except (StoreError, PermissionError, IdentityError) as exc:
        logging.getLogger(__name__).error("cannot start: %s", exc)
        print(f"pair node: cannot start: {exc}", file=sys.stderr)
        return exit_codes.ERROR
    except KeyboardInterrupt:
        return exit_codes.OK


def dev_workers(mode: str | None) -> list[WorkerSpec]:
    """The hidden ``--test-worker MODE``: the development package's supervision test worker
    (imported only when asked for); raises ValueError for an unknown mode."""
    if mode is None:
        return []
    if not devtools_present():
        raise ValueError("--test-worker needs a source checkout of PAIR")
    from backend.devtools import testworker

    if mode not in testworker.MODES:
        raise ValueError(f"--test-worker must be one of {', '.join(testworker.MODES)}")
    return [WorkerSpec(testworker.NAME, testworker.argv(mode))]


def _print_to_stdout(text: str) -> None:
    print(text, flush=True)
