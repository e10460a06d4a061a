"""What the render scripts share: Qt offscreen (unless another platform is set), the repository
on the import path, a broker connection whose answers are scripted, and running a coroutine on
Qt's event loop.

Importing it is what sets the platform and the path, so a script imports it before ``app``."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import qasync  # noqa: E402
from PySide6.QtWidgets import QApplication, QWidget  # noqa: E402

from app.broker.connection import BrokerConnection  # noqa: E402
from app.broker.launch import BrokerLaunch  # noqa: E402
from app.broker.state import Ownership, ServiceState  # noqa: E402
from backend.protocol.contract import Method  # noqa: E402

P = TypeVar("P")
R = TypeVar("R")


class ScriptedConnection(BrokerConnection):
    """A connection without a broker: each method answers its scripted raw result (a callable
    answer is called with the call's parameters)."""

    def __init__(self, answers: dict[str, Any]) -> None:
        super().__init__(BrokerLaunch(Path("/nonexistent/pair-render")))
        self.answers = answers

    @property
    def ownership(self) -> Ownership | None:
        return Ownership.OWNED

    async def call(self, method: Method[P, R], params: P | None = None, timeout: float = 10.0) -> R:
        answer = self.answers.get(method.name)
        return method.decode_result(answer(params) if callable(answer) else answer)

    def become_ready(self) -> None:
        """Pretend a session started and is ready."""
        self.session_changed.emit()
        self._set_state(ServiceState.READY)
        self.session_ready.emit()

    def push(self, method: str, params: Any) -> None:
        """Deliver one push as the broker would."""
        self.notification_received.emit(method, params)


async def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``condition()`` until it holds (a page fills as the scripted answers arrive)."""
    async with asyncio.timeout(timeout):
        while True:
            if condition():
                return
            await asyncio.sleep(0.05)


def save_png(widget: QWidget, out: Path) -> None:
    """Save what ``widget`` shows to ``out`` (a PNG), or say why it could not."""
    if not widget.grab().save(str(out)):
        raise OSError(f"could not write {out}")
    print(f"saved {out}")


def run_on_qt(work: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``work()`` on a Qt application's event loop (qasync), as the app runs."""
    qt_app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(qt_app, QApplication)
    with asyncio.Runner(loop_factory=lambda: qasync.QEventLoop(qt_app)) as runner:
        runner.run(work())


def render_to_out_dir(
    description: str | None,
    default_out_dir: Path,
    render: Callable[[Path], Coroutine[Any, Any, None]],
) -> int:
    """Parse ``--out-dir``, make that folder, and ``render`` into it on Qt's event loop."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out-dir", type=Path, default=default_out_dir)
    arguments = parser.parse_args()
    arguments.out_dir.mkdir(parents=True, exist_ok=True)
    run_on_qt(lambda: render(arguments.out_dir))
    return 0
