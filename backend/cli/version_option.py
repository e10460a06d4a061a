"""``pair --version``: the version and the build's commit, looked up only when asked for."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from backend.common.buildinfo import describe


class ShowVersion(argparse.Action):
    """Print ``pair 0.1.0 (commit 1a2b3c4)`` and exit, like argparse's ``version`` action but
    without asking git each time a parser is built."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(
            option_strings,
            dest=dest,
            default=argparse.SUPPRESS,
            nargs=0,
            help="show PAIR's version and the commit it was built from, then exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        print(describe(), file=sys.stdout)
        parser.exit()
