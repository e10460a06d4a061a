"""``PAIR_QUIT_WHEN_READY=1``: the app says on stdout when its window is first drawn and when it
is connected to a broker, then quits by itself. The frozen app's smoke test
(``packaging/smoke.py``) starts it this way and times the first line."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QWidget

from app.broker.connection import BrokerConnection
from app.broker.state import ServiceState

WINDOW_SHOWN = "quit-when-ready: window shown"


def _print_now(line: str) -> None:
    print(line, flush=True)


class QuitWhenReady(QObject):
    """Watches ``window`` (an event filter) and ``connection``; asks to quit once the window was
    drawn and the connection was ready, or at once when the connection failed."""

    def __init__(
        self,
        connection: BrokerConnection,
        window: QWidget,
        request_quit: Callable[[], None],
        write: Callable[[str], None] = _print_now,
    ) -> None:
        super().__init__(window)
        self._connection = connection
        self._request_quit = request_quit
        self._write = write
        self._shown = False
        self._ready = False
        window.installEventFilter(self)
        connection.state_changed.connect(self._on_connection_state_changed)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Notes the window's first paint; never consumes the event."""
        if not self._shown and event.type() == QEvent.Type.Paint:
            self._shown = True
            self._write(WINDOW_SHOWN)
            self._quit_when_both()
        return False

    def _on_connection_state_changed(self, state: ServiceState) -> None:
        if state is ServiceState.READY and not self._ready:
            self._ready = True
            ownership = self._connection.ownership
            self._write(
                f"quit-when-ready: ready, {ownership.value if ownership else 'no'} broker"
                f" pid {self._connection.pid}"
            )
            self._quit_when_both()
        elif state is ServiceState.FAILED:
            self._write(f"quit-when-ready: failed: {self._connection.failure_message}")
            self._request_quit()

    def _quit_when_both(self) -> None:
        if self._shown and self._ready:
            self._request_quit()
