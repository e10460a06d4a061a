"""A minimal worker that proves process supervision (``pair node --test-worker MODE``).

Modes: ``healthy`` answers heartbeats and ``echo``; ``crash-on-start`` exits with status 1 at
once, which exercises the restart budget. It does no product work; the proxy becomes the real
worker of this kind.
"""

from __future__ import annotations

import sys
from typing import Any

from backend.workers.runtime import run_worker

MODES = ("healthy", "crash-on-start")


async def _echo(params: Any) -> Any:
    return params


def main(argv: list[str]) -> int:
    """Run in the mode given as the first argument."""
    mode = argv[0] if argv else "healthy"
    if mode not in MODES:
        print(f"testworker: unknown mode {mode!r}; use one of {', '.join(MODES)}", file=sys.stderr)
        return 2
    if mode == "crash-on-start":
        print("testworker: crashing on start as asked", file=sys.stderr)
        return 1
    return run_worker("testworker", {"echo": _echo})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
