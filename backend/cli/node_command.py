"""``pair node``: run the broker in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from backend.broker import Broker, BrokerConfig
from backend.cli import exit_codes
from backend.core import logs
from backend.core.instance import AlreadyRunning
from backend.core.store import StoreError
from backend.protocol.endpoint import log_dir, resolve_data_dir
from backend.protocol.types import Ports

PORT_FLAGS: tuple[tuple[str, int, str], ...] = (
    ("--node-port", 14320, "node API port (node info, pairing, cluster)"),
    ("--ollama-port", 11434, "Ollama-compatible front door"),
    ("--openai-port", 1234, "OpenAI-compatible front door for LM Studio models"),
    ("--llamacpp-port", 8080, "front door for llama.cpp models"),
)


def port_number(text: str) -> int:
    """An argparse type: a TCP port 1-65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 1-65535")
    return port


def run(args: argparse.Namespace) -> int:
    """Run the broker until it is stopped; the exit code says how it ended."""
    data_dir = resolve_data_dir(args.data_dir)
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
    config = BrokerConfig(
        data_dir=data_dir,
        ports=Ports(
            node=args.node_port,
            ollama=args.ollama_port,
            openai=args.openai_port,
            llamacpp=args.llamacpp_port,
        ),
        stdio=args.stdio,
        log_level=args.log_level,
        log_file=log_file,
        test_worker=args.test_worker,
    )
    announce = None if args.stdio else _print_to_stdout
    try:
        return asyncio.run(Broker(config).run(announce))
    except AlreadyRunning as exc:
        print(f"pair node: {exc}", file=sys.stderr)
        return exit_codes.ALREADY_RUNNING
    except (StoreError, PermissionError) as exc:
        logging.getLogger(__name__).error("cannot start: %s", exc)
        print(f"pair node: cannot start: {exc}", file=sys.stderr)
        return exit_codes.ERROR
    except KeyboardInterrupt:
        return exit_codes.OK


def _print_to_stdout(text: str) -> None:
    print(text, flush=True)
