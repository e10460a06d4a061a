"""Where the app keeps its own preferences (window, filters, tray): one INI file per user.

Always the INI format, so ``QSettings.setPath`` (tests) decides where it lives on every
platform; the broker's settings are separate (``settings.json`` in the data dir).
"""

from __future__ import annotations

from PySide6.QtCore import QSettings

ORGANISATION = "PAIR"
APPLICATION = "PAIR"


def preferences() -> QSettings:
    """The user's app preferences."""
    return QSettings(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, ORGANISATION, APPLICATION
    )
