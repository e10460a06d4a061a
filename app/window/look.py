"""How states look and read: the one table of state and chart colours (a light and a dark
shade each), service labels, sentences and durations."""

from __future__ import annotations

from enum import Enum

import msgspec
from PySide6.QtGui import QColor, QGuiApplication

from app.broker.state import Ownership, ServiceState
from app.window.theme import is_dark
from backend.protocol.types.broker import Severity


class State(Enum):
    """What a coloured word or dot says, the same on every page."""

    OK = "ok"  # running, loaded, online, done
    PENDING = "pending"  # starting, stopping, loading, waiting
    WARN = "warn"  # worked, but look: a timeout, a partial result
    ERROR = "error"  # failed
    IDLE = "idle"  # stopped, offline, not installed
    INFO = "info"  # busy in a neutral way: a job running now


class Series(Enum):
    """A live figure on a node card, each with its own chart colour."""

    CPU = "cpu"
    MEMORY = "memory"
    GPU = "gpu"
    VRAM = "vram"


class Shade(msgspec.Struct, frozen=True):
    """One colour in a light and a dark variant, each readable as text on its palette."""

    light: str
    dark: str

    def pick(self, dark: bool) -> QColor:
        """The variant for a dark or a light palette."""
        return QColor(self.dark if dark else self.light)


# Light shades reach 4.5:1 on white and on the window grey; dark ones on PAIR's dark greys.
STATE_SHADES: dict[State, Shade] = {
    State.OK: Shade("#27702b", "#81c995"),
    State.PENDING: Shade("#9a5b00", "#fdd663"),
    State.WARN: Shade("#a84d00", "#fcad70"),
    State.ERROR: Shade("#c62828", "#f28b82"),
    State.IDLE: Shade("#6b6b6b", "#9aa0a6"),
    State.INFO: Shade("#1565c0", "#8ab4f8"),
}
SERIES_SHADES: dict[Series, Shade] = {
    Series.CPU: Shade("#3b82f6", "#60a5fa"),
    Series.MEMORY: Shade("#8b5cf6", "#a78bfa"),
    Series.GPU: Shade("#10b981", "#34d399"),
    Series.VRAM: Shade("#f59e0b", "#fbbf24"),
}
KNOB = Shade("#ffffff", "#e8eaed")  # a switch's knob: light on either track


def app_is_dark() -> bool:
    """Whether the application's palette is a dark one now."""
    return is_dark(QGuiApplication.palette())


def state_colour(state: State, dark: bool | None = None) -> QColor:
    """The colour for ``state`` on a dark or light palette (None: the application's now)."""
    return STATE_SHADES[state].pick(app_is_dark() if dark is None else dark)


def series_colour(series: Series, dark: bool | None = None) -> QColor:
    """A chart's colour on a dark or light palette (None: the application's now)."""
    return SERIES_SHADES[series].pick(app_is_dark() if dark is None else dark)


SEVERITY_STATES: dict[Severity, State] = {
    "info": State.INFO,
    "warning": State.WARN,
    "error": State.ERROR,
}


def severity_colour(severity: Severity, dark: bool | None = None) -> QColor:
    """A service error's colour by its severity (None: the application's palette now)."""
    return state_colour(SEVERITY_STATES[severity], dark)


class StateLook(msgspec.Struct, frozen=True):
    """A service state's short label and the state its indicator shows."""

    label: str
    state: State

    @property
    def colour(self) -> QColor:
        """The indicator's colour on the application's palette now."""
        return state_colour(self.state)


STATE_LOOKS: dict[ServiceState, StateLook] = {
    ServiceState.CONNECTING: StateLook("Connecting", State.PENDING),
    ServiceState.READY: StateLook("Ready", State.OK),
    ServiceState.DISCONNECTED: StateLook("Disconnected", State.IDLE),
    ServiceState.FAILED: StateLook("Failed", State.ERROR),
}


def describe(state: ServiceState, ownership: Ownership | None) -> str:
    """One sentence for the Service page: what is going on and what quitting will do."""
    if state is ServiceState.CONNECTING:
        if ownership is Ownership.OWNED:
            return "Starting the PAIR service…"
        return "Looking for the PAIR service…"
    if state is ServiceState.READY:
        if ownership is Ownership.OWNED:
            return "This app started the service; quitting the app stops it."
        return (
            "The service was started outside this app (pair node, a system service or another "
            "window); quitting the app leaves it running."
        )
    if state is ServiceState.DISCONNECTED:
        return (
            "The service stopped outside this app. The app reconnects when it is back; "
            "Start runs it from here."
        )
    return "The service could not be kept running, so the app stopped trying. Start tries again."


def format_duration(seconds: float) -> str:
    """A compact human duration: ``45 s``, ``12 min``, ``3 h 05 min``, ``2 d 4 h``."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes, _ = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"
