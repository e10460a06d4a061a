"""Where the files shipped beside the code are: ``resources/`` of a source checkout, or the same
folder inside a frozen app (PyInstaller unpacks or lays it out under ``sys._MEIPASS``)."""

from __future__ import annotations

import sys
from pathlib import Path

# app/ sits in the checkout's root, beside resources/.
_CHECKOUT_RESOURCES = Path(__file__).resolve().parent.parent / "resources"


def resources_root() -> Path:
    """The ``resources`` folder of this run: the frozen app's or the source checkout's."""
    bundle = getattr(sys, "_MEIPASS", None)
    if getattr(sys, "frozen", False) and isinstance(bundle, str):
        return Path(bundle) / "resources"
    return _CHECKOUT_RESOURCES


def resource_path(relative: str) -> Path:
    """``resource_path("icons/pair.svg")``: that file under ``resources_root()`` (it may not
    exist, e.g. in a wheel installed without the checkout)."""
    return resources_root() / relative
