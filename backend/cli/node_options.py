"""The options of running a node (``pair`` alone and ``pair node``) and the ``--data-dir`` every
command takes: what the parser needs of ``pair node`` without loading the broker, which only
``foreground_command`` imports, when a node runs."""

from __future__ import annotations

import argparse

from backend.protocol.types.broker import LOG_LEVELS

PORT_FLAGS: tuple[tuple[str, int, str], ...] = (
    ("--node-port", 14320, "node API port (node info, pairing, cluster)"),
    ("--ollama-port", 11434, "Ollama-compatible front door"),
    ("--openai-port", 1234, "front door at LM Studio's usual port (every model, every API)"),
    ("--llamacpp-port", 8080, "front door at llama-server's usual port (every model, every API)"),
    ("--relay-port", 14321, "relay between paired computers (mutual TLS)"),
)


# The range the door-port settings and the app's engine ports take: ports below 1024 need
# administrator rights, which PAIR never asks for.
LOWEST_PORT = 1024


def port_number(text: str) -> int:
    """An argparse type: a TCP port 1024-65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not LOWEST_PORT <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside {LOWEST_PORT}-65535")
    return port


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    """``--data-dir DIR``: which node a command talks to (or runs)."""
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="the node's data directory (default: the per-user data dir)",
    )


def add_node_options(parser: argparse.ArgumentParser) -> None:
    """The data dir, the ports, the log level and JSON logs of a node this command runs."""
    add_data_dir(parser)
    for flag, default, what in PORT_FLAGS:
        parser.add_argument(
            flag,
            type=port_number,
            default=default,
            metavar="PORT",
            help=f"{what} (default {default})",
        )
    parser.add_argument(
        "--log-level", choices=LOG_LEVELS, help="override the log_level setting for this run"
    )
    parser.add_argument("--json-logs", action="store_true", help="log JSON lines to stderr")
