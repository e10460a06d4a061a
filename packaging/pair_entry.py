"""The frozen app's entry point: ``pair`` with every command, and the desktop app in-process.

A frozen app has no ``python -m``: the broker starts its workers as ``pair worker NAME`` and the
app starts its broker as ``pair node --stdio`` (``backend.common.self_command``), so this one
executable is the app, the broker and its workers.
"""

from __future__ import annotations

import sys


def run_app(argv: list[str]) -> int:
    """``python -m app`` of a source checkout; imported here so that the broker and its workers
    never load Qt."""
    from app.__main__ import main as app_main

    return app_main(argv)


def main() -> int:
    """Run ``pair`` with this process's arguments."""
    from backend.cli.main import main as pair_main

    return pair_main(run_gui=run_app)


if __name__ == "__main__":
    sys.exit(main())
