"""Render the main window, connected to a real broker it spawned, to PNG files.

    .venv/bin/python scripts/render_screens.py [--out build/screens]

It renders offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set.

The app starts its own broker against a temporary data dir on free ports, waits until the
service is ready and the Service page is filled in, and saves: the Overview page, the Service
page, the Service page with the banner of a real worker crash (its test worker is killed), and
the Service page after the broker was killed more often than the restart budget allows
(failed). Then it quits, which stops the broker.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import qasync  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.application import PairApplication  # noqa: E402
from app.broker.state import ServiceState  # noqa: E402
from app.options import AppOptions  # noqa: E402
from backend.protocol import methods  # noqa: E402

WINDOW_SIZE = (1000, 680)
READY_TIMEOUT_S = 60.0


def free_port() -> int:
    """A TCP port nothing listens on now, so the broker stays off PAIR's default ports."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_flags() -> tuple[str, ...]:
    """Free ports for every listener of the broker."""
    flags = ("--node-port", "--ollama-port", "--openai-port", "--llamacpp-port", "--relay-port")
    return tuple(item for flag in flags for item in (flag, str(free_port())))


def service_shown(app: PairApplication) -> bool:
    """The broker is ready and the snapshots the Service page shows have arrived."""
    return (
        app.connection.state is ServiceState.READY
        and app.components.rowCount() > 0
        and app.service.info.broker_version is not None
        and app.service.info.log_level is not None
    )


async def wait_until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (it spans widgets and a broker process) until it holds."""
    async with asyncio.timeout(READY_TIMEOUT_S):
        while True:
            if condition():
                return
            await asyncio.sleep(0.05)


async def save(app: PairApplication, page: str, path: Path) -> Path:
    """Show ``page``, let layouts settle, grab the window into ``path``."""
    app.window.show_page(page)
    await asyncio.sleep(0.2)
    if not app.window.grab().save(str(path)):
        raise OSError(f"could not write {path}")
    return path


async def kill_test_worker(app: PairApplication) -> None:
    """SIGKILL the broker's test worker so the screen shows a real supervisor error."""
    status = await app.connection.call(methods.STATUS)
    worker = next(c for c in status.components if c.name == "testworker")
    assert worker.pid is not None, "the test worker runs"
    os.kill(worker.pid, signal.SIGKILL)


async def crash_until_failed(app: PairApplication) -> None:
    """Kill the owned broker (by its PID) until the restart budget is spent."""
    while app.connection.state is not ServiceState.FAILED:
        await wait_until(lambda: app.connection.state is not ServiceState.CONNECTING)
        pid = app.connection.pid
        if pid is not None and app.connection.state is ServiceState.READY:
            os.kill(pid, signal.SIGKILL)
            await wait_until(lambda killed=pid: app.connection.pid != killed)


async def render(out_dir: Path) -> list[Path]:
    """Start the app on a temporary node, save the screens, shut down; return the files."""
    saved: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="pair-screens-") as temp:
        options = AppOptions(Path(temp) / "node", (*port_flags(), "--test-worker", "healthy"))
        app = PairApplication(options, use_tray=False, open_url=lambda _url: True)
        app.window.resize(*WINDOW_SIZE)
        app.start()
        try:
            await wait_until(lambda: service_shown(app))
            saved.append(await save(app, "overview", out_dir / "overview.png"))
            saved.append(await save(app, "settings", out_dir / "service.png"))
            await kill_test_worker(app)  # a real crash: the supervisor raises its banner
            await wait_until(lambda: app.errors.rowCount() > 0)
            saved.append(await save(app, "settings", out_dir / "service-error.png"))
            await crash_until_failed(app)
            saved.append(await save(app, "settings", out_dir / "service-failed.png"))
        finally:
            await app.shutdown()
    return saved


def main(argv: list[str] | None = None) -> int:
    """Parse ``--out``, render, print the files written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "screens")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    qt_app = QApplication.instance() or QApplication(sys.argv[:1])
    with asyncio.Runner(loop_factory=lambda: qasync.QEventLoop(qt_app)) as runner:
        for path in runner.run(render(args.out)):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
