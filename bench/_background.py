"""Busy background processes: the other programs on a user's desktop, as the benchmarks see them.

Not a benchmark itself: ``bench/front_door.py --background-load N`` runs N of them while it
measures. Each is a Python interpreter spinning in a tight loop (pure CPU, no I/O, no memory
traffic to speak of) at the default niceness, as a game or a build competes for the cores with
the proxy, its clients and the engine. Started and stopped by PID.
"""

from __future__ import annotations

import subprocess
import sys
from types import TracebackType

from _common import stop_process

# -S: no site import, so each starts spinning at once and holds no more than an interpreter.
_SPIN = (sys.executable, "-S", "-c", "while True: pass")


class BackgroundLoad:
    """``count`` busy processes while the context is open (none for 0); ``pids`` names them."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    def __enter__(self) -> BackgroundLoad:
        try:
            for _ in range(self.count):
                self._processes.append(
                    subprocess.Popen(_SPIN, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
                )
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop every busy process started here, by its PID. Idempotent."""
        while self._processes:
            stop_process(self._processes.pop())
