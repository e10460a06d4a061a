"""``pair demo``: three nodes on this computer with emulated engines and a trickle of requests.

A developer tool for trying PAIR without other computers and for screenshots; the cluster is
built and run by ``backend.devtools.demo``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from backend.cli import exit_codes
from backend.cli.dev_only import refuse_without_devtools
from backend.cli.display import has_display


def add_parser(commands: Any) -> None:
    """Register ``demo`` on the ``pair`` subcommand parser."""
    demo = commands.add_parser(
        "demo",
        help="start three demo nodes on this computer (emulated engines) and open the app",
        description="Start a small PAIR cluster on this computer: gaming-pc (Ollama emulator), "
        "laptop (Ollama and LM Studio emulators) and gpu-box (a real llama-server with a tiny "
        "random model when installed, and an Ollama emulator), on free ports with mDNS off. "
        "gaming-pc knows the other two as manual nodes; a trickle of requests through its "
        "front doors fills the Jobs screen. Everything stops when the app (or Ctrl+C) ends.",
    )
    demo.add_argument(
        "--root",
        metavar="DIR",
        type=Path,
        help="keep the nodes' data dirs here (default: a temporary dir, removed afterwards)",
    )
    demo.add_argument(
        "--headless",
        action="store_true",
        help="no app: print gaming-pc's endpoints and run until Ctrl+C",
    )
    demo.add_argument("--no-trickle", action="store_true", help="send no requests")


def run(args: argparse.Namespace) -> int:
    """Run the demo until the app exits or Ctrl+C; the exit code says how it ended."""
    if refuse_without_devtools("demo"):
        return exit_codes.ERROR
    from backend.devtools.demo import DemoError, DemoOptions, run_demo
    from backend.protocol.errors import RpcError

    if sys.platform == "win32":
        print("pair demo: needs Linux or macOS (its engine stand-ins are scripts)", file=sys.stderr)
        return exit_codes.ERROR
    headless = args.headless
    if not headless and not has_display():
        print("No display found: running the demo headless.", flush=True)
        headless = True
    options = DemoOptions(root=args.root, headless=headless, trickle=not args.no_trickle)
    try:
        asyncio.run(run_demo(options, say=_say))
    except DemoError as error:
        print(f"pair demo: {error}", file=sys.stderr)
        return exit_codes.ERROR
    except RpcError as error:
        print(f"pair demo: a demo node answered with an error: {error}", file=sys.stderr)
        return exit_codes.ERROR
    return exit_codes.OK


def _say(line: str) -> None:
    print(line, flush=True)
