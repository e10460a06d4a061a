"""``python -m app``: the desktop app (``pair`` execs this when a display exists)."""

from __future__ import annotations

import sys

from app.application import run
from app.logging_setup import configure_logging
from app.options import parse_options


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, set up logging and run the app; return the exit code."""
    options = parse_options(sys.argv[1:] if argv is None else argv)
    configure_logging(options.data_dir, options.log_level or "info")
    return run(options)


if __name__ == "__main__":
    sys.exit(main())
