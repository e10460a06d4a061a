"""How long a newcomer waits for a first answer, step by step, from the Welcome dialog.

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/first_answer.py [--keep DIR]

The real app (``PairApplication``, offscreen) on a fresh data dir starts its own broker; its
llama.cpp is the venv's real ``llama-server``; the local Hugging Face emulator stands in for the
internet and serves the tiny generated GGUF (about 0.5 MB) for the catalogue's first model
(``tests/support/first_answer.py`` has the steps, shared with
``tests/gui/test_first_answer.py``). It clicks what a newcomer clicks: Pull in the Welcome
dialog, Try it, Send in the Playground, and prints the time of each step since the app was
built: the window shown, the service ready, the engines found, the pull done (downloaded and
loaded into llama.cpp), the first token and the whole answer.

A real download adds the model's size over the line's bandwidth (bench/README.md has the
figures); the tiny model also starts and answers faster than a real one. Not part of the
pytest run; every process the app starts is stopped by the app.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import qasync
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

import app.application
from app.application import PairApplication
from app.options import AppOptions
from backend.devtools.emulators.hub import build_hub_app
from backend.devtools.emulators.server import EmulatorServer
from backend.devtools.llama_server import search_llama_server
from tests.engines.fixtures import cached_model
from tests.gui.helpers import wait_until
from tests.support import first_answer
from tests.support.ports import free_port


class Clock:
    """Seconds since the start, printed as each step ends."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.steps: list[tuple[str, float]] = []

    def mark(self, step: str) -> None:
        """Record and print the time ``step`` ended."""
        elapsed = time.perf_counter() - self.start
        self.steps.append((step, elapsed))
        print(f"{elapsed:7.2f} s  {step}", file=sys.stderr, flush=True)


async def run(data_dir: Path, llama_server: Path) -> Clock:
    """The steps, timed; the app and the emulator are stopped at the end."""
    hub = EmulatorServer(build_hub_app(cached_model("tiny")))
    await hub.start()
    os.environ["PAIR_HUB_URL"] = hub.url
    catalog = first_answer.emulated_catalog(hub.url)
    # The app reads its catalogue through this name; the emulated one is this run's only.
    setattr(app.application, "load_catalog", lambda: catalog)  # noqa: B010
    first_answer.prepare_data_dir(data_dir, llama_server)
    ports = ("--node-port", "--ollama-port", "--openai-port", "--llamacpp-port", "--relay-port")
    broker_args = tuple(item for flag in ports for item in (flag, str(free_port())))
    clock = Clock()
    pair = PairApplication(AppOptions(data_dir, broker_args), use_tray=False)
    try:
        pair.start()
        await wait_until(pair.window.isVisible, 30, "the window")
        clock.mark("window shown")
        await first_answer.wait_for_service(pair)
        clock.mark("service ready")
        dialog = await first_answer.wait_for_engines(pair)
        clock.mark("engines found (Welcome dialog)")
        await first_answer.pull_first_model(dialog)
        clock.mark("first model pulled and loaded (Try it enabled)")
        await first_answer.try_it(pair, dialog)
        first_token = asyncio.Event()
        sending = asyncio.ensure_future(first_answer.send(pair, first_token))
        await first_token.wait()
        clock.mark("first token in the Playground")
        answer = await sending
        clock.mark(f"answer done ({answer.results[0].tokens} tokens)")
    finally:
        await pair.shutdown()
        await hub.stop()
    return clock


def main() -> int:
    """Parse the flags, run once, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--keep", type=Path, help="use (and keep) this data dir")
    options = parser.parse_args()
    search = search_llama_server()
    if search.binary is None:
        print(f"llama-server unavailable: {search.reason}", file=sys.stderr)
        return 2
    os.environ.setdefault("PAIR_DISCOVERY_MDNS", "0")
    os.environ.setdefault("PAIR_KEYRING", "off")
    with tempfile.TemporaryDirectory(prefix="pair-first-answer-") as scratch:
        data_dir = options.keep or Path(scratch) / "node"
        os.environ["PAIR_PREFERENCES"] = str(Path(scratch) / "preferences.ini")
        qt_app = QApplication.instance() or QApplication([])
        assert isinstance(qt_app, QApplication)
        qt_app.setQuitOnLastWindowClosed(False)
        QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, scratch)
        with asyncio.Runner(loop_factory=lambda: qasync.QEventLoop(qt_app)) as runner:
            clock = runner.run(run(data_dir, search.binary))
    print("| step | seconds since the app was built |\n|---|---|")
    for step, elapsed in clock.steps:
        print(f"| {step} | {elapsed:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
