"""Where the app keeps its own preferences (window, filters, tray): one INI file per user.

Always the INI format, so ``QSettings.setPath`` (tests) decides where it lives on every
platform; the broker's settings are separate (``settings.json`` in the data dir).
``PAIR_PREFERENCES=FILE`` puts them in that file instead: ``pair demo`` sets it so a demo's
first run and filters never touch the user's own app.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from PySide6.QtCore import QSettings

ORGANISATION = "PAIR"
APPLICATION = "PAIR"
ENV_PREFERENCES = "PAIR_PREFERENCES"


def preferences_file(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The file ``PAIR_PREFERENCES`` names, or None for the user's usual place."""
    given = environ.get(ENV_PREFERENCES, "").strip()
    return Path(given).expanduser() if given else None


def preferences(environ: Mapping[str, str] = os.environ) -> QSettings:
    """The app preferences: the file ``PAIR_PREFERENCES`` names, else the user's."""
    file = preferences_file(environ)
    if file is not None:
        return QSettings(str(file), QSettings.Format.IniFormat)
    return QSettings(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, ORGANISATION, APPLICATION
    )
