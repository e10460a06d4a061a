"""How service states look and read: colours, labels, sentences, durations."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor

from app.broker.state import Ownership, ServiceState


@dataclass(frozen=True, slots=True)
class StateLook:
    """A state's short label and indicator colour."""

    label: str
    colour: QColor


STATE_LOOKS: dict[ServiceState, StateLook] = {
    ServiceState.CONNECTING: StateLook("Connecting", QColor("#e0a000")),
    ServiceState.READY: StateLook("Ready", QColor("#2e7d32")),
    ServiceState.DISCONNECTED: StateLook("Disconnected", QColor("#808080")),
    ServiceState.FAILED: StateLook("Failed", QColor("#c62828")),
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
