"""Render the Playground page to PNGs, against a scripted cluster and a scripted front door.

    .venv/bin/python scripts/render_playground.py [--out-dir /tmp/playground]

Offscreen (QT_QPA_PLATFORM=offscreen) unless another platform is set; no broker runs. The
stores and controllers are built as the composition root builds them, on a scripted
connection (this computer and a laptop, each with models); the door is a real socket that
streams a short answer naming the laptop as the computer that served it. Saves
``playground.png`` (an answer, its figures, the curl snippet and the check of every engine,
one engine failing) and ``playground-error.png`` (the door's refusal in plain words, the
Python snippet).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import qasync  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.controllers.playground_wire import ChatRequest  # noqa: E402
from app.window.playground_page import PlaygroundPage  # noqa: E402
from tests.gui.helpers import wait_until  # noqa: E402
from tests.gui.playground_rig import LAPTOP_ID, SELF_ID, ScriptedDoor, start_rig  # noqa: E402

PAGE_SIZE = (1180, 980)
ANSWER = "Packets leave the desk, cross the quiet hall, and the laptop answers."


async def render(out_dir: Path) -> list[Path]:
    """Render both states of the page; the PNGs written."""
    door = ScriptedDoor(
        words=tuple(f"{word} " for word in ANSWER.split()),
        word_delay=0.02,
        served_by={"phi4:14b": LAPTOP_ID},
    )  # fmt: skip
    door.refuse[f"llamacpp/gemma-3-1b@{SELF_ID}"] = (
        503, {"error": {"message": "llama.cpp is starting: its model is still loading"}}
    )  # fmt: skip
    door.refuse["gone:1b"] = (
        404,
        {"error": {"message": "The model `gone:1b` does not exist or is not available on "
                              "this computer.", "type": "not_found_error"}},
    )  # fmt: skip
    rig = await start_rig(door)
    page = PlaygroundPage(rig.playground, rig.check)
    page.resize(*PAGE_SIZE)
    page.show()
    try:
        form = page.form
        form.model_combo.setCurrentIndex(form.model_combo.findData("phi4:14b"))
        form.system_field.setPlainText("You are a poet who writes about networks.")
        form.send_button.click()
        await wait_until(lambda: "tokens/s" in page.answer.figures.text(), 10)
        page.check_box.check_button.click()
        await wait_until(lambda: not rig.check.running, 10)
        written = [_save(page, out_dir / "playground.png")]
        door_url = rig.playground.door_url
        assert door_url is not None
        rig.playground.send(
            ChatRequest(api="openai", door_url=door_url, model="gone:1b", user="hi")
        )
        await wait_until(lambda: page.answer.error.text() != "", 10)
        form.api_combo.setCurrentIndex(form.api_combo.findData("anthropic"))
        page.snippets.tabs.setCurrentIndex(1)
        written.append(_save(page, out_dir / "playground-error.png"))
        return written
    finally:
        page.close()
        await rig.close()


def _save(page: PlaygroundPage, path: Path) -> Path:
    QApplication.processEvents()
    page.grab().save(str(path))
    return path


def main() -> int:
    """Parse the arguments, render, print the files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out-dir", type=Path, default=Path("/tmp/playground"))
    out_dir: Path = parser.parse_args().out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    qt_app = QApplication.instance() or QApplication([])
    assert isinstance(qt_app, QApplication)
    qt_app.setQuitOnLastWindowClosed(False)  # closing the page must not stop the loop
    with asyncio.Runner(loop_factory=lambda: qasync.QEventLoop(qt_app)) as runner:
        written = runner.run(render(out_dir))
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
