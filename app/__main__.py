"""``python -m app``: the desktop app (``pair`` execs this when a display exists)."""

from __future__ import annotations

import logging
import sys

from app.application import run
from app.options import parse_options


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, set up logging and run the app; return the exit code."""
    options = parse_options(sys.argv[1:] if argv is None else argv)
    level = (options.log_level or "warning").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(options)


if __name__ == "__main__":
    sys.exit(main())
