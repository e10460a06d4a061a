"""Commands built on the development package (``backend.devtools``), which the frozen app
leaves out: they say so instead of failing on an import."""

from __future__ import annotations

import importlib.util
import sys

DEV_PACKAGE = "backend.devtools"


def devtools_present() -> bool:
    """Whether ``backend.devtools`` can be imported (a source checkout or a wheel, not a frozen
    app)."""
    try:
        return importlib.util.find_spec(DEV_PACKAGE) is not None
    except ImportError:
        return False


def refuse_without_devtools(command: str) -> bool:
    """True, after saying why on stderr, when ``command`` cannot run here."""
    if devtools_present():
        return False
    print(
        f"pair {command}: a development tool; it needs a source checkout of PAIR "
        "(the installed app leaves the development package out)",
        file=sys.stderr,
    )
    return True
