"""A newcomer's first answer on a fresh data dir, as they get it: the real app and broker, the
venv's real llama-server, and the local Hugging Face emulator standing in for the internet.
The Welcome dialog finds llama.cpp, offers Qwen2.5 0.5B Instruct, Pull downloads it (from the
emulator) and loads it, Try it opens the Playground with it, and Send streams an answer served
by this computer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.application import PairApplication
from app.options import AppOptions
from backend.devtools.emulators.server import EmulatorServer
from tests.support import first_answer
from tests.support.first_answer import MODEL

pytest_plugins = ["tests.engines.fixtures"]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture
async def app(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    broker_args: tuple[str, ...],
    hub: EmulatorServer,
    llama_server_binary: Path,
) -> AsyncIterator[PairApplication]:
    """The app on a fresh data dir, its catalogue's first model served by the emulator."""
    monkeypatch.setenv("PAIR_DISCOVERY_MDNS", "0")
    monkeypatch.setenv("PAIR_HUB_URL", hub.url)
    catalog = first_answer.emulated_catalog(hub.url)
    monkeypatch.setattr("app.application.load_catalog", lambda: catalog)
    data_dir = tmp_path / "node"
    first_answer.prepare_data_dir(data_dir, llama_server_binary)
    started = PairApplication(
        AppOptions(data_dir, broker_args), use_tray=False, open_url=lambda _url: True
    )
    started.start()
    try:
        yield started
    finally:
        await started.shutdown()


async def test_a_newcomer_gets_a_first_answer_from_the_welcome_dialog(
    app: PairApplication, qtbot: QtBot
) -> None:
    await first_answer.wait_for_service(app)
    dialog = await first_answer.wait_for_engines(app)
    assert dialog.first_model.heading.text() == "<b>Qwen2.5 0.5B Instruct</b> · 491 MB"
    assert not dialog.try_box.try_button.isEnabled()
    ready = await first_answer.pull_first_model(dialog)
    assert MODEL in ready and "llama.cpp" in ready
    await first_answer.try_it(app, dialog)
    assert not dialog.isVisible()
    page = app.playground_page
    assert page.form.model_combo.currentData() == MODEL
    assert "this computer" in page.form.model_combo.currentText()
    answer = await first_answer.send(app)
    result = answer.results[0]
    assert result.error is None, result.error
    assert len(answer.pieces) > 1  # streamed record by record, not at once
    # The tiny model's random tokens include carriage returns, which the text box turns into
    # line breaks: the box shows the answer, not byte for byte.
    assert "".join(answer.pieces) != "" and page.answer.text.toPlainText() != ""
    assert "Served by this computer" in page.answer.figures.text()
