"""The Playground page against a real app, broker and proxy worker, with PAIR's Ollama emulator
as the engine: a prompt streams back through the front door with the computer that served it,
time to first token and tokens/s; each of the three APIs answers; Stop cancels; an unknown
model shows the door's own 404 message; the check of every engine says OK; and the snippets
the page shows, run as they are, get an answer from the same door."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from app.application import PairApplication
from app.broker.state import ServiceState
from app.controllers.inference_check import InferenceCheckController
from app.controllers.playground import PlaygroundController
from app.controllers.playground_stream import ChatResult
from app.controllers.playground_wire import ChatRequest
from app.options import AppOptions
from app.window.playground_page import PlaygroundPage
from backend.protocol import methods
from backend.protocol.types.base import EngineName
from backend.protocol.types.engines import EngineRef
from tests.gui.helpers import wait_until
from tests.integration.engines.conftest import OLLAMA_SHIM, write_override, write_script
from tests.support.first_answer import door_routes
from tests.support.ports import free_port

READY_S = 60.0
MODEL = "tinyllama:latest"


@pytest.fixture
async def app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broker_args: tuple[str, ...]
) -> AsyncIterator[PairApplication]:
    """A started app on its own broker whose Ollama (the emulator) runs."""
    monkeypatch.setenv("PAIR_DISCOVERY_MDNS", "0")
    data_dir = tmp_path / "node"
    data_dir.mkdir()
    shim = write_script(tmp_path / "ollama", OLLAMA_SHIM)
    runtime = {"port": free_port(), "ready": {"timeout_s": 30}}
    write_override(data_dir, "ollama", {"detect": [{"path": str(shim)}], "runtime": runtime})
    started = PairApplication(
        AppOptions(data_dir, broker_args), use_tray=False, open_url=lambda _url: True
    )
    started.start()
    try:
        await wait_until(lambda: started.connection.state is ServiceState.READY, READY_S)
        await started.connection.call(
            methods.ENGINE_START, EngineRef(engine=EngineName("ollama")), timeout=40
        )
        yield started
    finally:
        await started.shutdown()


class Page:
    """The page under test and what its controller reported."""

    def __init__(self, app: PairApplication, qtbot: QtBot) -> None:
        self.controller = PlaygroundController(app.endpoints, app.engines_store, app.cluster_store)
        self.check = InferenceCheckController(app.endpoints, app.engines_store, app.cluster_store)
        self.widget = PlaygroundPage(self.controller, self.check)
        qtbot.addWidget(self.widget)
        self.widget.show()
        self.pieces: list[str] = []
        self.results: list[ChatResult] = []
        self.controller.answer_started.connect(lambda _request: self.pieces.clear())
        self.controller.text_arrived.connect(self.pieces.append)
        self.controller.answer_ended.connect(self.results.append)

    async def answer(self, count: int) -> ChatResult:
        """The ``count``-th result, once it came."""
        await wait_until(lambda: len(self.results) >= count, 30, "the answer to end")
        return self.results[count - 1]

    async def close(self) -> None:
        await self.controller.close()
        await self.check.close()


async def test_the_playground_streams_stops_and_explains_through_the_real_door(
    app: PairApplication, qtbot: QtBot, tmp_path: Path
) -> None:
    page = Page(app, qtbot)
    try:
        await _answers_with_its_figures(app, page)
        await _every_api_answers(page)
        await _stop_cancels(page)
        await _unknown_model_shows_the_doors_message(page)
        await _the_check_of_every_engine_says_ok(page)
        await _the_snippets_run_as_shown(page, tmp_path)
    finally:
        await page.close()


async def _answers_with_its_figures(app: PairApplication, page: Page) -> None:
    form, answer = page.widget.form, page.widget.answer
    await wait_until(lambda: form.model_combo.findData(MODEL) >= 0, 30, "the model list")
    await wait_until(lambda: page.controller.door_url is not None, 20, "the door")
    await door_routes(page.controller.door_url, MODEL)
    form.model_combo.setCurrentIndex(form.model_combo.findData(MODEL))
    assert "this computer" in form.model_combo.currentText()
    form.max_tokens_box.setValue(12)
    QTest.mouseClick(form.send_button, Qt.MouseButton.LeftButton)
    result = await page.answer(1)
    assert result.error is None, result.error
    assert len(page.pieces) > 1  # streamed record by record, not at once
    assert answer.text.toPlainText() == "".join(page.pieces) != ""
    own_id = app.cluster_store.status.node_id  # type: ignore[union-attr]
    assert result.served_by == own_id
    figures = answer.figures.text()
    assert "Served by this computer" in figures
    assert "first token" in figures and "tokens/s" in figures
    assert result.first_token_s is not None and result.tokens_per_s is not None
    assert answer.error.text() == ""
    assert "/v1/chat/completions" in page.widget.snippets.curl.toPlainText()


async def _every_api_answers(page: Page) -> None:
    form = page.widget.form
    form.max_tokens_box.setValue(6)
    for index, api in enumerate(("ollama", "anthropic"), start=2):
        form.api_combo.setCurrentIndex(form.api_combo.findData(api))
        page.widget.send()
        result = await page.answer(index)
        assert result.error is None and result.chunks > 0, (api, result)
        assert page.widget.answer.text.toPlainText() != ""
    form.api_combo.setCurrentIndex(form.api_combo.findData("openai"))


async def _stop_cancels(page: Page) -> None:
    form, answer = page.widget.form, page.widget.answer
    form.max_tokens_box.setValue(2000)  # minutes at the emulator's pace
    page.widget.send()
    await wait_until(lambda: bool(page.pieces), 30, "the first words")
    assert form.stop_button.isEnabled()
    QTest.mouseClick(form.stop_button, Qt.MouseButton.LeftButton)
    result = await page.answer(4)
    assert result.cancelled and not form.stop_button.isEnabled()
    assert answer.error.text() == "Stopped."
    shown = answer.text.toPlainText()
    await asyncio.sleep(0.3)
    assert answer.text.toPlainText() == shown  # nothing more arrives


async def _unknown_model_shows_the_doors_message(page: Page) -> None:
    door = page.controller.door_url
    assert door is not None
    page.controller.send(ChatRequest(api="openai", door_url=door, model="no-such:model", user="hi"))
    result = await page.answer(5)
    error = page.widget.answer.error.text()
    assert error == result.error
    assert error.startswith("The model `no-such:model` does not exist") and "(HTTP 404)" in error
    assert "{" not in error and "ClientResponse" not in error


async def _the_check_of_every_engine_says_ok(page: Page) -> None:
    box = page.widget.check_box
    QTest.mouseClick(box.check_button, Qt.MouseButton.LeftButton)
    await wait_until(lambda: not page.check.running and bool(page.check.rows), 30, "the check")
    outcome = box.outcome("this computer", "ollama")
    assert outcome.startswith("OK, first token in"), outcome
    assert box.check_button.isEnabled()


async def _the_snippets_run_as_shown(page: Page, tmp_path: Path) -> None:
    form, snippets = page.widget.form, page.widget.snippets
    form.max_tokens_box.setValue(5)
    for api in ("openai", "ollama", "anthropic"):
        form.api_combo.setCurrentIndex(form.api_combo.findData(api))
        program = tmp_path / f"snippet_{api}.py"  # not ``openai.py``: it would import itself
        program.write_text(snippets.python.toPlainText())
        ran = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(program)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ran.returncode == 0 and ran.stdout.strip(), (api, ran.stderr[-2000:])
    curl = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-c", snippets.curl.toPlainText()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert curl.returncode == 0 and "content_block_delta" in curl.stdout, curl.stderr
