"""A newcomer's first answer, step by step, on the real app: the Welcome dialog's Pull, its Try
it, then Send in the Playground. Shared by ``tests/gui/test_first_answer.py`` and
``bench/first_answer.py``.

The internet is the local Hugging Face emulator (``backend/devtools/emulators/hub.py``): the
catalogue the app is given (``emulated_catalog``) is the shipped Qwen2.5 0.5B entry with its
model file's address moved to the emulator, which serves a tiny generated GGUF for it.
llama.cpp is the venv's real ``llama-server``, found through a user override in a fresh data
dir (``prepare_data_dir``).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import msgspec
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QAbstractButton

from app.application import PairApplication
from app.broker.state import ServiceState
from app.catalog import Catalog, load_catalog
from app.controllers.playground_stream import ChatResult
from app.window.welcome import WelcomeDialog
from tests.gui.helpers import wait_until
from tests.support.ports import free_port

FIRST_MODEL_ID = "qwen2.5-0.5b"
HUB_PATH = "/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/qwen2.5-0.5b-instruct-q4_k_m.gguf"
MODEL = "qwen2.5-0.5b-instruct-q4_k_m"  # the name llama.cpp lists it under
READY_S = 90.0
PULL_S = 180.0  # the download from loopback, then llama-server's start on the model
ANSWER_S = 60.0
MAX_TOKENS = 16


def emulated_catalog(hub_url: str) -> Catalog:
    """The shipped catalogue's first-model entry alone, its model file at ``hub_url``."""
    shipped = load_catalog()
    entry = next(entry for entry in shipped.entries if entry.id == FIRST_MODEL_ID)
    moved = msgspec.structs.replace(entry, engines={"llamacpp": hub_url + HUB_PATH})
    return Catalog((moved,))


def prepare_data_dir(data_dir: Path, llama_server: Path) -> None:
    """A fresh data dir whose llama.cpp is ``llama_server`` on a free port, small context."""
    engines = data_dir / "engines"
    engines.mkdir(parents=True, exist_ok=True)
    override = {"detect": [{"path": str(llama_server)}], "runtime": {"port": free_port()}}
    (engines / "llamacpp.json").write_text(json.dumps(override))
    (data_dir / "settings.json").write_text(json.dumps({"llamacpp_context": 1024}))


@dataclass
class FirstAnswer:
    """What the Playground showed: the streamed pieces and the result."""

    pieces: list[str] = field(default_factory=list)
    results: list[ChatResult] = field(default_factory=list)


def click(button: QAbstractButton) -> None:
    """A left click, as a person makes it (a disabled button ignores it)."""
    QTest.mouseClick(button, Qt.MouseButton.LeftButton)


async def wait_for_service(app: PairApplication) -> None:
    """The broker this app started answers."""
    await wait_until(lambda: app.connection.state is ServiceState.READY, READY_S, "the service")


async def wait_for_engines(app: PairApplication) -> WelcomeDialog:
    """The Welcome dialog is up and lists this computer's llama.cpp."""
    await wait_until(lambda: app.welcome.dialog is not None, READY_S, "the Welcome dialog")
    dialog = app.welcome.dialog
    assert dialog is not None
    await wait_until(lambda: "llamacpp" in dialog.engine_rows.names, READY_S, "the engines")
    return dialog


async def pull_first_model(dialog: WelcomeDialog) -> str:
    """Click Pull on the offered model and wait until Try it can be clicked; the model's name."""
    box = dialog.first_model
    # Pull stays disabled until the service has said which computer this is: a person waits
    # for the button to turn on, and so does this.
    await wait_until(
        lambda: box.pull_button.isVisible() and box.pull_button.isEnabled(),
        READY_S,
        "the offer of a first model, ready to pull",
    )
    click(box.pull_button)
    try:
        await wait_until(dialog.try_box.try_button.isEnabled, PULL_S, "the first model")
    except AssertionError as exc:
        state = dialog.first_model.status.text() or dialog.first_model.offer.text()
        raise AssertionError(f"{exc}; the step says: {state}") from None
    ready = dialog.first_model.status.text()
    assert ready.startswith("Ready on this computer"), ready
    return ready


async def try_it(app: PairApplication, dialog: WelcomeDialog) -> None:
    """Click Try it: the dialog closes and the Playground shows the model."""
    click(dialog.try_box.try_button)
    await wait_until(lambda: app.window.current_page == "playground", 5, "the Playground")


async def send(app: PairApplication, first_token: asyncio.Event | None = None) -> FirstAnswer:
    """Click Send in the Playground and wait for the whole answer."""
    page, answer = app.playground_page, FirstAnswer()

    def arrived(text: str) -> None:
        answer.pieces.append(text)
        if first_token is not None:
            first_token.set()

    app.playground.text_arrived.connect(arrived)
    app.playground.answer_ended.connect(answer.results.append)
    page.form.max_tokens_box.setValue(MAX_TOKENS)
    await wait_until(page.form.send_button.isEnabled, 20, "Send")
    await door_routes(app.playground.door_url, page.form.model_combo.currentData())
    click(page.form.send_button)
    try:
        await wait_until(lambda: bool(answer.results), ANSWER_S, "the answer")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {len(answer.pieces)} pieces came") from None
    return answer


async def door_routes(door: str | None, model: str) -> None:
    """Wait until the door routes ``model``: ``/api/show`` is answered from the routing table,
    while the lists ask the engines themselves, so a list can name a model a moment before the
    proxy worker's table has it (the table follows the engines' next inventory)."""
    assert door is not None
    status, text = 0, ""
    try:
        async with aiohttp.ClientSession() as session, asyncio.timeout(30):
            while True:
                async with session.post(door + "/api/show", json={"model": model}) as response:
                    status, text = response.status, await response.text()
                if status == 200:
                    return
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"the door never routed {model}: {status} {text[:200]}") from None
