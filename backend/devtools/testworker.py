"""A minimal worker that proves process supervision (``pair node --test-worker MODE``).

Modes: ``healthy`` answers heartbeats and ``echo``; ``crash-on-start`` exits with status 1 at
once, which exercises the restart budget. It does no product work: the CLI's hidden flag hands
the broker an extra worker named ``NAME`` that runs ``argv(mode)``; the broker never names it.
"""

from __future__ import annotations

import sys
from typing import Any, Final

from backend.workers.runtime import run_worker

NAME: Final = "testworker"
MODES: Final = ("healthy", "crash-on-start")


def argv(mode: str) -> tuple[str, ...]:
    """The command that runs this worker in ``mode`` (one of ``MODES``)."""
    return (sys.executable, "-m", "backend.devtools.testworker", mode)


async def _echo(params: Any) -> Any:
    return params


def main(arguments: list[str]) -> int:
    """Run in the mode given as the first argument."""
    mode = arguments[0] if arguments else "healthy"
    if mode not in MODES:
        print(f"testworker: unknown mode {mode!r}; use one of {', '.join(MODES)}", file=sys.stderr)
        return 2
    if mode == "crash-on-start":
        print("testworker: crashing on start as asked", file=sys.stderr)
        return 1
    return run_worker(NAME, {"echo": _echo})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
