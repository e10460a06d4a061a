"""The inference check: one tiny request per running engine of every computer, each pinned to
its computer and engine, with OK and the time to the first token or the door's error."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from app.controllers.inference_check import CHECK_MAX_TOKENS, CheckTarget, check_request
from app.window.inference_check import DESCRIPTION, InferenceCheckBox
from tests.gui.helpers import wait_until
from tests.gui.playground_rig import (
    LAPTOP,
    LOCAL_ENGINES,
    SELF_ID,
    ScriptedDoor,
    listing,
    start_rig,
)

GEMMA_PIN = f"llamacpp/gemma-3-1b@{SELF_ID}"


async def test_every_running_engine_of_every_computer_is_asked_once_pinned_to_it(
    qtbot: QtBot,
) -> None:
    door = ScriptedDoor()
    door.refuse[GEMMA_PIN] = (503, {"error": {"message": "llama.cpp is not running on desk"}})
    rig = await start_rig(door)
    try:
        box = InferenceCheckBox(rig.check)
        qtbot.addWidget(box)
        QTest.mouseClick(box.check_button, Qt.MouseButton.LeftButton)
        assert not box.check_button.isEnabled()  # one check at a time
        await wait_until(lambda: not rig.check.running, 10, "the check")
        # A loaded model first (no load to wait for), else the first listed; LM Studio on the
        # laptop is stopped, so it is not asked.
        assert sorted(door.received) == sorted(
            [f"ollama/qwen3:8b@{SELF_ID}", GEMMA_PIN, "ollama/llama3.2:3b@node-laptop"]
        )
        assert box.outcome("this computer", "ollama").startswith("OK, first token in ")
        assert box.outcome("laptop", "ollama").startswith("OK, first token in ")
        assert box.outcome("this computer", "llamacpp") == (
            "llama.cpp is not running on desk (HTTP 503)"
        )
        assert box.outcome("laptop", "lmstudio") == ""
        assert box.check_button.isEnabled() and box.table.topLevelItemCount() == 3
    finally:
        await rig.close()


async def test_an_engine_without_a_model_says_so_and_is_not_asked(qtbot: QtBot) -> None:
    models = listing({"ollama": ["qwen3:8b"]})
    rig = await start_rig(engines=LOCAL_ENGINES, models=models, members=())
    try:
        box = InferenceCheckBox(rig.check)
        qtbot.addWidget(box)
        box.check_button.click()
        await wait_until(lambda: not rig.check.running, 10, "the check")
        assert box.outcome("this computer", "llamacpp") == "No model to try on this engine."
        assert rig.door.received == [f"ollama/qwen3:8b@{SELF_ID}"]
        assert box.note.text() == DESCRIPTION
    finally:
        await rig.close()


async def test_with_no_engine_running_the_box_says_why(qtbot: QtBot) -> None:
    rig = await start_rig(engines=(), models=listing({}), members=({**LAPTOP, "engines": []},))
    try:
        box = InferenceCheckBox(rig.check)
        qtbot.addWidget(box)
        box.check_button.click()
        assert box.note.text() == "No engine is running on any computer of the cluster."
        assert box.table.topLevelItemCount() == 0 and box.check_button.isEnabled()
    finally:
        await rig.close()


def test_the_check_request_is_tiny_and_pinned() -> None:
    target = CheckTarget("laptop", "n2", "ollama", "Ollama", "phi4")
    request = check_request("http://127.0.0.1:1", target)
    assert request.model == "ollama/phi4@n2" and request.max_tokens == CHECK_MAX_TOKENS <= 8
    assert request.api == "openai"
